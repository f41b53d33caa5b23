"""Compacted ledgers as files of the broker (the standalone broker's compacted ledger store).

A compacted ledger is the file ``<ledgerId>.compacted`` in its managed ledger's directory
(:mod:`starquake.storage.compacted`), deleted with that directory. The committed one is named
by the metadata key ``/compaction/<ledger name>`` (its id, horizon and file name, compact
JSON), written once the new file is complete and fsynced: a crash before that write leaves an
unreferenced file, removed when the topic is next loaded; after it, the new one is loaded.

File I/O runs in worker threads, except the reads of an open compacted ledger: local
``pread`` calls, served at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote

from .api import ManagedLedger
from .compacted import (
    CompactedLedger,
    CompactedLedgerError,
    CompactedLedgerWriter,
    CompactedRecord,
    compacted_file_name,
    list_compacted_files,
    open_compacted_ledger,
)
from .compacted_store import CompactedLedgerReader
from .metadata import MetadataStore
from .position import Position
from .segment import fsync_dir

__all__ = [
    "CompactionRecord",
    "FileCompactedBuilder",
    "FileCompactedLedgers",
    "FileCompactedReader",
    "metadata_key",
]

log = logging.getLogger(__name__)

METADATA_PREFIX = "/compaction/"


def metadata_key(ledger_name: str) -> str:
    """The metadata key naming the committed compacted ledger of a managed ledger."""
    return METADATA_PREFIX + quote(ledger_name, safe="")


class CompactionRecord(NamedTuple):
    """What the metadata key stores: the compacted ledger, its horizon and its file."""

    ledger_id: int
    horizon: Position
    file: str

    def encode(self) -> bytes:
        """The record as stored in the metadata store (compact JSON)."""
        doc = {"ledgerId": self.ledger_id, "horizon": list(self.horizon), "file": self.file}
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> CompactionRecord:
        """The record stored as ``raw`` (CompactedLedgerError if it is not one)."""
        try:
            doc = json.loads(raw)
            horizon = Position(int(doc["horizon"][0]), int(doc["horizon"][1]))
            return cls(int(doc["ledgerId"]), horizon, str(doc["file"]))
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise CompactedLedgerError(f"damaged compaction record: {exc}") from exc


class FileCompactedReader:
    """An open compacted ledger file."""

    def __init__(self, ledger: CompactedLedger) -> None:
        self.ledger = ledger

    @property
    def ledger_id(self) -> int:
        return self.ledger.ledger_id

    @property
    def horizon(self) -> Position:
        return self.ledger.horizon

    @property
    def entries(self) -> int:
        return len(self.ledger)

    @property
    def size(self) -> int:
        return self.ledger.size

    @property
    def path(self) -> Path:
        """The file."""
        return self.ledger.path

    @property
    def last(self) -> Position | None:
        total = len(self.ledger)
        return self.ledger.position(total - 1) if total else None

    async def read_from(self, position: Position, max_entries: int) -> list[CompactedRecord]:
        """Read at once (a local file)."""
        ledger = self.ledger
        return ledger.read(ledger.find(position), max_entries)

    async def reopen(self) -> FileCompactedReader:
        ledger = self.ledger
        opened = await asyncio.to_thread(open_compacted_ledger, ledger.path, ledger.ledger_id)
        return FileCompactedReader(opened)

    def close(self) -> None:
        self.ledger.close()

    def __repr__(self) -> str:
        return f"FileCompactedReader({self.ledger!r})"


class FileCompactedBuilder:
    """A compacted ledger file being written (in worker threads)."""

    def __init__(self, writer: CompactedLedgerWriter) -> None:
        self._writer = writer

    @property
    def ledger_id(self) -> int:
        return self._writer.ledger_id

    async def append(self, items: Sequence[tuple[Position, bytes | memoryview]]) -> None:
        await asyncio.to_thread(self._writer.append, items)

    async def finish(self, horizon: Position) -> FileCompactedReader:
        writer = self._writer
        await asyncio.to_thread(writer.finish, horizon)
        opened = await asyncio.to_thread(open_compacted_ledger, writer.path, writer.ledger_id)
        return FileCompactedReader(opened)

    async def abort(self) -> None:
        await asyncio.to_thread(self._writer.abort)


class FileCompactedLedgers:
    """Compacted ledgers as files, recorded in ``metadata`` (see the module docstring)."""

    def __init__(self, metadata: MetadataStore, allocate: Callable[[], Awaitable[int]]) -> None:
        self._metadata = metadata
        self._allocate = allocate

    async def create(self, ledger: ManagedLedger) -> FileCompactedBuilder:
        ledger_id = await self._allocate()
        path = ledger.directory / compacted_file_name(ledger_id)
        return FileCompactedBuilder(await asyncio.to_thread(CompactedLedgerWriter, path, ledger_id))

    async def open_committed(self, ledger: ManagedLedger) -> FileCompactedReader | None:
        raw = await asyncio.to_thread(self._metadata.get, metadata_key(ledger.name))
        return await asyncio.to_thread(_open_committed, ledger, raw)

    async def commit(self, ledger: ManagedLedger, compacted: CompactedLedgerReader) -> None:
        """Write the record (from a worker thread); an answer lost after the write counts
        when the stored value is the one written."""
        assert isinstance(compacted, FileCompactedReader)
        key = metadata_key(ledger.name)
        record = CompactionRecord(compacted.ledger_id, compacted.horizon, compacted.path.name)
        raw = record.encode()
        store = self._metadata

        def write() -> None:
            try:
                store.put(key, raw)
            except Exception:
                if store.get(key) != raw:  # not stored after all
                    raise

        await asyncio.to_thread(write)

    async def delete(self, ledger: ManagedLedger, compacted: CompactedLedgerReader) -> None:
        assert isinstance(compacted, FileCompactedReader)
        compacted.close()
        await asyncio.to_thread(_remove, compacted.path)

    async def forget(self, name: str) -> None:
        await asyncio.to_thread(self._metadata.delete, metadata_key(name))


def _open_committed(ledger: ManagedLedger, raw: bytes | None) -> FileCompactedReader | None:
    """The committed compacted ledger of ``ledger`` (blocking). Files no record names, left by
    compactions that did not commit, are removed; none is when the named one cannot be
    opened (it is then logged: the view is lost, the files are kept for inspection)."""
    record = None
    if raw is not None:
        try:
            record = CompactionRecord.decode(raw)
        except CompactedLedgerError as exc:
            log.error("the compaction record of %s is damaged (%s); no view", ledger.name, exc)
            return None
    opened = None
    if record is not None:
        try:
            compacted = open_compacted_ledger(ledger.directory / record.file, record.ledger_id)
        except CompactedLedgerError as exc:
            log.error("the compacted view of %s cannot be opened: %s", ledger.name, exc)
            return None
        if compacted.horizon != record.horizon:
            compacted.close()
            log.error("the compacted view of %s does not match its record", ledger.name)
            return None
        opened = FileCompactedReader(compacted)
    for ledger_id, path in list_compacted_files(ledger.directory):
        if record is None or ledger_id != record.ledger_id:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                log.info("removed %s: a compaction that did not commit", path)
    return opened


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
        fsync_dir(path.parent)
