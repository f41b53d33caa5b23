"""Compacted ledgers: immutable files holding a topic's compacted view, written once.

A compacted ledger keeps copies of entries of a managed ledger under their *original* positions,
in position order. It is written by one writer from start to end, fsynced, and never changed
afterwards; it lives in the managed ledger's directory as ``<ledgerId>.compacted`` (ledger ids
come from the factory's allocator, so they never collide with a data ledger's), and goes with
that directory when the managed ledger is deleted. Recovery of the managed ledger ignores these
files.

File layout (all integers little-endian)::

    header, 16 bytes
      0  magic       4 bytes   b"SQCF"
      4  version     u16       1
      6  flags       u16       0
      8  ledger_id   u64
    records, back to back from offset 16, framed as in a ledger file (see segment.py):
      [length u32][crc u32 over the length and the data][data]
      data = [original ledger id i64][original entry id i64][entry bytes]
    index, at ``index_offset`` (the end of the last record)
      0  entries     u64       N
      8  horizon     i64, i64  the last position of the log the compaction covered
     24  size        u64       bytes of the entries (without framing)
     32  N x (ledger id i64, entry id i64, record offset u64)
    trailer, the last 16 bytes
      0  index_offset u64
      8  crc          u32      zlib.crc32 of the index followed by the 8 index_offset bytes
     12  magic        4 bytes  b"SQCE"

The trailer is written last, so a file whose writer did not finish (a crash, a full disk) has
no valid trailer and is refused by :func:`open_compacted_ledger`; a damaged record is found by
its own CRC when it is read.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from .position import Position, StorageError
from .segment import RECORD_HEADER_SIZE, encode_records, fsync_dir, parse_records, pwrite_all

__all__ = [
    "COMPACTED_SUFFIX",
    "CompactedLedger",
    "CompactedLedgerError",
    "CompactedLedgerWriter",
    "CompactedRecord",
    "compacted_file_name",
    "list_compacted_files",
    "open_compacted_ledger",
]

COMPACTED_SUFFIX = ".compacted"

_MAGIC = b"SQCF"
_END_MAGIC = b"SQCE"
_VERSION = 1
_HEADER = struct.Struct("<4sHHQ")
_KEY = struct.Struct("<qq")
_INDEX_HEAD = struct.Struct("<QqqQ")
_INDEX_ROW = struct.Struct("<qqQ")
_TRAILER = struct.Struct("<QI4s")
_OFFSET = struct.Struct("<Q")
_READ_CHUNK = 4 * 1024 * 1024


class CompactedLedgerError(StorageError):
    """A compacted ledger file that is incomplete, damaged or not the one expected."""


def compacted_file_name(ledger_id: int) -> str:
    """The file name of compacted ledger ``ledger_id``."""
    return f"{ledger_id}{COMPACTED_SUFFIX}"


def list_compacted_files(directory: Path) -> list[tuple[int, Path]]:
    """``(ledger id, path)`` of every compacted ledger file in ``directory``, by id."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        stem, _, ext = name.partition(".")
        if stem.isdigit() and "." + ext == COMPACTED_SUFFIX:
            found.append((int(stem), directory / name))
    return sorted(found)


class CompactedLedgerWriter:
    """Writes one compacted ledger file; positions must be appended in increasing order.

    Blocking (file I/O): use it from a worker thread. :meth:`finish` makes the file durable;
    :meth:`abort` removes an unfinished one.
    """

    def __init__(self, path: Path, ledger_id: int) -> None:
        self.path = path
        self.ledger_id = ledger_id
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        try:
            self._fd = os.open(path, flags, 0o644)
        except OSError as exc:
            raise CompactedLedgerError(f"cannot create {path}: {exc}") from exc
        self._ledgers: array[int] = array("q")
        self._entries: array[int] = array("q")
        self._offsets: array[int] = array("q")
        self._size = 0
        self._end = 0
        self._last: Position | None = None
        self._write(_HEADER.pack(_MAGIC, _VERSION, 0, ledger_id))

    def _write(self, data: bytes) -> None:
        try:
            pwrite_all(self._fd, data, self._end)
        except OSError as exc:
            raise CompactedLedgerError(f"cannot write {self.path}: {exc}") from exc
        self._end += len(data)

    @property
    def entries(self) -> int:
        """Entries appended so far."""
        return len(self._offsets)

    def append(self, items: Iterable[tuple[Position, bytes | memoryview]]) -> None:
        """Append entries (position, bytes), each after every position appended before."""
        datas: list[bytes] = []
        offset = self._end
        for position, data in items:
            if self._last is not None and position <= self._last:
                raise CompactedLedgerError(
                    f"compacted entries must be appended in order: {position} after {self._last}"
                )
            self._last = position
            record = _KEY.pack(position[0], position[1]) + bytes(data)
            self._ledgers.append(position[0])
            self._entries.append(position[1])
            self._offsets.append(offset)
            offset += RECORD_HEADER_SIZE + len(record)
            self._size += len(data)
            datas.append(record)
        if datas:
            parts: list[bytes] = []
            encode_records(datas, parts)
            self._write(b"".join(parts))

    def finish(self, horizon: Position) -> None:
        """Write the index and trailer, fsync the file and its directory, close it."""
        index_offset = self._end
        body = bytearray(_INDEX_HEAD.pack(len(self._offsets), horizon[0], horizon[1], self._size))
        for ledger_id, entry_id, offset in zip(
            self._ledgers, self._entries, self._offsets, strict=True
        ):
            body += _INDEX_ROW.pack(ledger_id, entry_id, offset)
        offset_bytes = _OFFSET.pack(index_offset)
        crc = zlib.crc32(offset_bytes, zlib.crc32(body))
        self._write(bytes(body) + _TRAILER.pack(index_offset, crc, _END_MAGIC))
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise CompactedLedgerError(f"cannot fsync {self.path}: {exc}") from exc
        finally:
            os.close(self._fd)
            self._fd = -1
        fsync_dir(self.path.parent)

    def abort(self) -> None:
        """Close and remove the unfinished file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class CompactedRecord(NamedTuple):
    """One entry read from a compacted ledger; ``data`` is None if its record is damaged."""

    position: Position
    data: memoryview | None


class CompactedLedger:
    """An open compacted ledger: its index in memory, entries read with ``pread``.

    Reads do not move a file offset, so a ledger may be read from several threads.
    """

    def __init__(
        self,
        path: Path,
        ledger_id: int,
        fd: int,
        horizon: Position,
        size: int,
        ledgers: array[int],
        entries: array[int],
        offsets: array[int],
        records_end: int,
    ) -> None:
        self.path = path
        self.ledger_id = ledger_id
        self.horizon = horizon
        """The last position of the managed ledger this compaction covered."""
        self.size = size
        """Bytes of the entries it holds."""
        self._fd = fd
        self._ledgers = ledgers
        self._entries = entries
        self._offsets = offsets
        self._records_end = records_end

    def __len__(self) -> int:
        return len(self._offsets)

    def position(self, index: int) -> Position:
        """The original position of the ``index``-th entry."""
        return Position(self._ledgers[index], self._entries[index])

    def find(self, position: tuple[int, int]) -> int:
        """Index of the first entry whose position is ``>= position`` (``len`` if none)."""
        lo, hi = 0, len(self._offsets)
        ledgers, entries = self._ledgers, self._entries
        want_ledger, want_entry = position
        while lo < hi:
            mid = (lo + hi) // 2
            ledger_id = ledgers[mid]
            if ledger_id < want_ledger or (ledger_id == want_ledger and entries[mid] < want_entry):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _end_of(self, index: int) -> int:
        return self._offsets[index + 1] if index + 1 < len(self._offsets) else self._records_end

    def read(self, first: int, count: int) -> list[CompactedRecord]:
        """The entries ``first .. first + count - 1`` (fewer at the end of the ledger)."""
        last = min(first + count, len(self._offsets)) - 1
        out: list[CompactedRecord] = []
        index = first
        while index <= last:
            start = self._offsets[index]
            stop = index
            while stop < last and self._end_of(stop + 1) - start <= _READ_CHUNK:
                stop += 1
            end = self._end_of(stop)
            if self._fd < 0:
                raise CompactedLedgerError(f"compacted ledger {self.path} is closed")
            try:
                buf = os.pread(self._fd, end - start, start)
            except OSError as exc:
                raise CompactedLedgerError(f"cannot read {self.path}: {exc}") from exc
            starts = [self._offsets[i] - start for i in range(index, stop + 1)]
            for i, record in enumerate(parse_records(buf, starts, end - start)):
                position = self.position(index + i)
                if record is None or len(record) < _KEY.size:
                    out.append(CompactedRecord(position, None))
                    continue
                ledger_id, entry_id = _KEY.unpack_from(record)
                if ledger_id != position.ledger_id or entry_id != position.entry_id:
                    out.append(CompactedRecord(position, None))
                else:
                    out.append(CompactedRecord(position, record[_KEY.size :]))
            index = stop + 1
        return out

    def verify(self) -> list[int]:
        """Read every record; the indexes of the damaged ones (empty when the file is sound)."""
        damaged = []
        step = 1024
        for first in range(0, len(self._offsets), step):
            for i, record in enumerate(self.read(first, step)):
                if record.data is None:
                    damaged.append(first + i)
        return damaged

    def close(self) -> None:
        """Release the file descriptor."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __repr__(self) -> str:
        return (
            f"CompactedLedger({self.ledger_id}, entries={len(self)}, horizon={self.horizon}, "
            f"path={self.path})"
        )


def _check_rows(
    ledgers: Sequence[int], entries: Sequence[int], offsets: Sequence[int], records_end: int
) -> None:
    previous = (-(2**63), -(2**63))
    previous_offset = _HEADER.size - 1
    for ledger_id, entry_id, offset in zip(ledgers, entries, offsets, strict=True):
        if (ledger_id, entry_id) <= previous:
            raise CompactedLedgerError("index positions are not in increasing order")
        if offset <= previous_offset or offset + RECORD_HEADER_SIZE + _KEY.size > records_end:
            raise CompactedLedgerError("index offsets do not fit the records")
        previous = (ledger_id, entry_id)
        previous_offset = offset
    if offsets and offsets[0] != _HEADER.size:
        raise CompactedLedgerError("the first record is not right after the header")
    if not offsets and records_end != _HEADER.size:
        raise CompactedLedgerError("bytes between the header and the index")


def open_compacted_ledger(path: Path, ledger_id: int) -> CompactedLedger:
    """Open a finished compacted ledger and load its index (blocking).

    Raises :class:`CompactedLedgerError` when the file is missing, was not finished, or its
    header, index or trailer is damaged.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise CompactedLedgerError(f"cannot open {path}: {exc}") from exc
    try:
        size = os.fstat(fd).st_size
        if size < _HEADER.size + _INDEX_HEAD.size + _TRAILER.size:
            raise CompactedLedgerError(f"{path} is too short ({size} bytes): not finished")
        header = os.pread(fd, _HEADER.size, 0)
        if _HEADER.unpack(header) != (_MAGIC, _VERSION, 0, ledger_id):
            raise CompactedLedgerError(f"{path} has a wrong or damaged header")
        index_offset, crc, magic = _TRAILER.unpack(
            os.pread(fd, _TRAILER.size, size - _TRAILER.size)
        )
        if magic != _END_MAGIC:
            raise CompactedLedgerError(f"{path} has no trailer: its writing was not finished")
        index_end = size - _TRAILER.size
        if not _HEADER.size <= index_offset <= index_end - _INDEX_HEAD.size:
            raise CompactedLedgerError(f"{path} has a damaged trailer")
        body = os.pread(fd, index_end - index_offset, index_offset)
        if zlib.crc32(_OFFSET.pack(index_offset), zlib.crc32(body)) != crc:
            raise CompactedLedgerError(f"{path} has a damaged index (checksum mismatch)")
        count, horizon_ledger, horizon_entry, entry_bytes = _INDEX_HEAD.unpack_from(body)
        if len(body) != _INDEX_HEAD.size + count * _INDEX_ROW.size:
            raise CompactedLedgerError(f"{path} has an index of the wrong size")
        ledgers: array[int] = array("q")
        entries: array[int] = array("q")
        offsets: array[int] = array("q")
        for ledger, entry, offset in _INDEX_ROW.iter_unpack(memoryview(body)[_INDEX_HEAD.size :]):
            ledgers.append(ledger)
            entries.append(entry)
            offsets.append(offset)
        _check_rows(ledgers, entries, offsets, index_offset)
    except BaseException:
        os.close(fd)
        raise
    return CompactedLedger(
        path,
        ledger_id,
        fd,
        Position(horizon_ledger, horizon_entry),
        entry_bytes,
        ledgers,
        entries,
        offsets,
        index_offset,
    )
