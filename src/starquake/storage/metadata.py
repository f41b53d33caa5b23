"""Metadata store: a small key/value interface (later also backed by ZooKeeper or etcd).

Keys are absolute paths such as ``/admin/tenants/public``. :class:`SqliteMetadataStore` is the
default; :class:`MemoryMetadataStore` is for tests and single-process tools.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from .faults import StorageFaults

__all__ = ["MemoryMetadataStore", "MetadataStore", "SqliteMetadataStore"]


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
        self.faults = faults
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS kv "
            "(key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID"
        )
        self._closed = False

    def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None."""
        with self._lock:
            row = self._db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

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
                            "INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value)
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
