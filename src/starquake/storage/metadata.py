"""Metadata store: a small key/value interface (later also backed by ZooKeeper or etcd).

Keys are absolute paths such as ``/admin/tenants/public``. :class:`SqliteMetadataStore` is the
default; :class:`MemoryMetadataStore` is for tests and single-process tools.

Every value stored in SQLite carries a CRC32 over its key and its bytes (column ``crc``): a value
whose checksum does not match is never handed out; reading it raises
:class:`MetadataDamagedError` naming the key. A file written before checksums existed (schema
version 0, no ``crc`` column) is migrated when opened: its values get their checksums in one
transaction, and the schema version (SQLite's ``user_version``) becomes 1.
"""

from __future__ import annotations

import sqlite3
import threading
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from .faults import StorageFaults
from .position import StorageError

__all__ = [
    "MemoryMetadataStore",
    "MetadataDamagedError",
    "MetadataStore",
    "SqliteMetadataStore",
    "value_checksum",
]

_SCHEMA_VERSION = 1
"""0: values without checksums (the first format); 1: every value has its ``crc``."""


class MetadataDamagedError(StorageError):
    """A stored metadata value failed its checksum: it must not be acted on."""

    def __init__(self, key: str, where: str) -> None:
        super().__init__(
            f"metadata value {key!r} in {where} is damaged (checksum mismatch); it is not used"
        )
        self.key = key


def value_checksum(key: str, value: bytes) -> int:
    """The CRC32 stored beside ``value``: over the key's UTF-8 bytes, a NUL, then the value (a
    value copied under another key fails its check too)."""
    return zlib.crc32(value, zlib.crc32(key.encode() + b"\0"))


class MetadataStore(Protocol):
    """Key/value store for cursor states, ledger id reservations and broker metadata."""

    def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None."""
        ...

    def put(self, key: str, value: bytes) -> None:
        """Create or replace ``key``."""
        ...

    def put_many(self, items: Iterable[tuple[str, bytes | None]]) -> None:
        """Apply every write in one transaction; a None value deletes the key."""
        ...

    def delete(self, key: str) -> None:
        """Remove ``key`` (no error if absent)."""
        ...

    def list_children(self, prefix: str) -> list[str]:
        """Sorted names of the direct children of ``prefix``.

        ``child`` is listed when a key ``prefix + "/" + child`` exists or any key below it does
        (ZooKeeper-like implicit parents).
        """
        ...

    def close(self) -> None:
        """Release the store."""
        ...


def _child_range(prefix: str) -> tuple[str, str]:
    base = prefix.rstrip("/") + "/"
    return base, base[:-1] + "0"  # '0' is the character right after '/'


def _children(base: str, keys: Iterable[str]) -> list[str]:
    children = {key[len(base) :].split("/", 1)[0] for key in keys}
    children.discard("")
    return sorted(children)


class SqliteMetadataStore:
    """Metadata in one SQLite file: WAL journal, ``synchronous=FULL``, thread-safe (one lock)."""

    def __init__(self, path: Path, faults: StorageFaults | None = None) -> None:
        """Open (creating or migrating) the store; raises :class:`StorageError` naming the file
        if it cannot be read, is not a database, is damaged or cannot be written."""
        self.faults = faults
        self.path = path
        self._lock = threading.Lock()
        self._closed = False
        try:
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open the metadata store {path}: {exc}") from None
        try:
            self._open()
        except sqlite3.Error as exc:
            self._db.close()
            raise StorageError(f"cannot use the metadata store {path}: {exc}") from None
        except BaseException:
            self._db.close()
            raise

    def _open(self) -> None:
        db = self._db
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        problems = [row[0] for row in db.execute("PRAGMA quick_check").fetchall()]
        if problems != ["ok"]:
            raise StorageError(
                f"the metadata store {self.path} is damaged: {'; '.join(map(str, problems[:3]))}"
            )
        # One write transaction at once: a file that cannot be written (read-only file or
        # directory, full disk) stops the start here rather than at the first change.
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(
                "CREATE TABLE IF NOT EXISTS kv "
                "(key TEXT PRIMARY KEY, value BLOB NOT NULL, crc INTEGER) WITHOUT ROWID"
            )
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version > _SCHEMA_VERSION:
                raise StorageError(
                    f"the metadata store {self.path} has schema version {version}, written by a "
                    f"newer Starquake (this one knows up to {_SCHEMA_VERSION})"
                )
            if version < _SCHEMA_VERSION:
                self._migrate()
            db.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _migrate(self) -> None:
        """Schema 0 to 1 (inside the opening transaction): checksum every existing value."""
        db = self._db
        columns = {row[1] for row in db.execute("PRAGMA table_info(kv)").fetchall()}
        if "crc" not in columns:
            db.execute("ALTER TABLE kv ADD COLUMN crc INTEGER")
        rows = db.execute("SELECT key, value FROM kv").fetchall()
        db.executemany(
            "UPDATE kv SET crc = ? WHERE key = ?",
            [(value_checksum(key, bytes(value)), key) for key, value in rows],
        )

    def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None; raises :class:`MetadataDamagedError` if it is
        damaged."""
        with self._lock:
            row = self._db.execute("SELECT value, crc FROM kv WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        value = bytes(row[0])
        if row[1] is None or int(row[1]) != value_checksum(key, value):
            raise MetadataDamagedError(key, str(self.path))
        return value

    def put(self, key: str, value: bytes) -> None:
        """Create or replace ``key`` (durable when this returns)."""
        self.put_many([(key, value)])

    def put_many(self, items: Iterable[tuple[str, bytes | None]]) -> None:
        """Apply every write in one transaction; a None value deletes the key."""
        items = list(items)
        if not items:
            return
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                for key, value in items:
                    if value is None:
                        db.execute("DELETE FROM kv WHERE key = ?", (key,))
                    else:
                        db.execute(
                            "INSERT OR REPLACE INTO kv (key, value, crc) VALUES (?, ?, ?)",
                            (key, value, value_checksum(key, bytes(value))),
                        )
                if self.faults is not None:
                    self.faults.before_metadata_commit(items)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def delete(self, key: str) -> None:
        """Remove ``key`` (no error if absent)."""
        self.put_many([(key, None)])

    def list_children(self, prefix: str) -> list[str]:
        """Sorted names of the direct children of ``prefix`` (see :class:`MetadataStore`)."""
        lo, hi = _child_range(prefix)
        with self._lock:
            rows = self._db.execute(
                "SELECT key FROM kv WHERE key >= ? AND key < ? ORDER BY key", (lo, hi)
            ).fetchall()
        return _children(lo, (r[0] for r in rows))

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()


class MemoryMetadataStore:
    """Metadata kept in a dict (not durable)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None."""
        with self._lock:
            return self._data.get(key)

    def put(self, key: str, value: bytes) -> None:
        """Create or replace ``key``."""
        with self._lock:
            self._data[key] = bytes(value)

    def put_many(self, items: Iterable[tuple[str, bytes | None]]) -> None:
        """Apply every write atomically; a None value deletes the key."""
        items = list(items)
        with self._lock:
            for key, value in items:
                if value is None:
                    self._data.pop(key, None)
                else:
                    self._data[key] = bytes(value)

    def delete(self, key: str) -> None:
        """Remove ``key`` (no error if absent)."""
        with self._lock:
            self._data.pop(key, None)

    def list_children(self, prefix: str) -> list[str]:
        """Sorted names of the direct children of ``prefix`` (see :class:`MetadataStore`)."""
        lo, hi = _child_range(prefix)
        with self._lock:
            keys = sorted(k for k in self._data if lo <= k < hi)
        return _children(lo, keys)

    def close(self) -> None:
        """Nothing to release."""
