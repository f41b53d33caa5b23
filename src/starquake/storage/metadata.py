"""Metadata store: a small versioned key/value interface, as ZooKeeper's and JetStream's.

Keys are absolute paths such as ``/admin/tenants/public``. :class:`SqliteMetadataStore` is the
default; :class:`MemoryMetadataStore` is for tests and single-process tools; the cluster's
store on a JetStream key-value bucket (``starquake.cluster.kv_metadata``) has the same names.

Every write gives the value a new *version*, greater than every version the store handed out
before (never reused, even for a key deleted and created again). ``put`` and ``delete`` take an
expected version: ``None`` (any), :data:`ABSENT` (only if the key does not exist; for ``put``)
or a version (only if the key is still at it); a mismatch raises :class:`BadVersionError` and
changes nothing.

Every value stored in SQLite carries a CRC32 over its key and its bytes (column ``crc``): a value
whose checksum does not match is never handed out; reading it raises
:class:`MetadataDamagedError` naming the key. A file written before checksums existed (schema
version 0, no ``crc`` column) is migrated when opened: its values get their checksums in one
transaction. Schema version 2 adds the ``version`` column: a file of version 1 gets versions
1..n for its values (in key order) when opened. The schema version is SQLite's
``user_version``.
"""

from __future__ import annotations

import sqlite3
import threading
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Final, NamedTuple, Protocol

from .faults import StorageFaults
from .position import StorageError

__all__ = [
    "ABSENT",
    "BadVersionError",
    "MemoryMetadataStore",
    "MetadataDamagedError",
    "MetadataStore",
    "SqliteMetadataStore",
    "Versioned",
    "direct_children",
    "value_checksum",
]

_SCHEMA_VERSION = 2
"""0: values without checksums (the first format); 1: every value has its ``crc``; 2: and its
``version`` (the last one handed out is in table ``kv_version``)."""

ABSENT: Final = 0
"""The expected version of a key that must not exist (versions start at 1)."""


class BadVersionError(StorageError):
    """A compare-and-set write found another version than the one expected."""

    def __init__(self, key: str, expected: int | None) -> None:
        wanted = "absent" if expected == ABSENT else f"at version {expected}"
        super().__init__(f"metadata {key!r} is not {wanted}")
        self.key = key


class Versioned(NamedTuple):
    """A stored value and its version."""

    value: bytes
    version: int


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

    def get_versioned(self, key: str) -> Versioned | None:
        """The value of ``key`` and its version, or None."""
        ...

    def put(self, key: str, value: bytes, expected_version: int | None = None) -> int:
        """Create or replace ``key`` (with ``expected_version``: only if it is at that
        version, or :data:`ABSENT`; else :class:`BadVersionError`); the new version."""
        ...

    def put_many(self, items: Iterable[tuple[str, bytes | None]]) -> None:
        """Apply every write in one transaction; a None value deletes the key."""
        ...

    def delete(self, key: str, expected_version: int | None = None) -> None:
        """Remove ``key`` (no error if absent; with ``expected_version``: only if it is at
        that version, else :class:`BadVersionError`)."""
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


def check_version(key: str, current: int | None, expected: int | None) -> None:
    """Raise :class:`BadVersionError` unless a key at ``current`` (None: absent) may be written
    when ``expected`` is asked."""
    if expected is None or (current or ABSENT) == expected:
        return
    raise BadVersionError(key, expected)


def _child_range(prefix: str) -> tuple[str, str]:
    base = prefix.rstrip("/") + "/"
    return base, base[:-1] + "0"  # '0' is the character right after '/'


def _children(base: str, keys: Iterable[str]) -> list[str]:
    children = {key[len(base) :].split("/", 1)[0] for key in keys}
    children.discard("")
    return sorted(children)


def direct_children(prefix: str, keys: Iterable[str]) -> list[str]:
    """Sorted names of the direct children of ``prefix`` among ``keys`` (any keys)."""
    lo, hi = _child_range(prefix)
    return _children(lo, (key for key in keys if lo <= key < hi))


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
                "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL, "
                "crc INTEGER, version INTEGER) WITHOUT ROWID"
            )
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version > _SCHEMA_VERSION:
                raise StorageError(
                    f"the metadata store {self.path} has schema version {version}, written by a "
                    f"newer Starquake (this one knows up to {_SCHEMA_VERSION})"
                )
            if version < 1:
                self._migrate_to_checksums()
            if version < 2:
                self._migrate_to_versions()
            db.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _migrate_to_checksums(self) -> None:
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

    def _migrate_to_versions(self) -> None:
        """Schema 1 to 2 (inside the opening transaction): versions 1..n for the values."""
        db = self._db
        columns = {row[1] for row in db.execute("PRAGMA table_info(kv)").fetchall()}
        if "version" not in columns:
            db.execute("ALTER TABLE kv ADD COLUMN version INTEGER")
        keys = [row[0] for row in db.execute("SELECT key FROM kv ORDER BY key").fetchall()]
        db.executemany(
            "UPDATE kv SET version = ? WHERE key = ?", [(i + 1, k) for i, k in enumerate(keys)]
        )
        db.execute(
            "CREATE TABLE IF NOT EXISTS kv_version (id INTEGER PRIMARY KEY CHECK (id = 0), "
            "last INTEGER NOT NULL)"
        )
        db.execute("INSERT OR REPLACE INTO kv_version (id, last) VALUES (0, ?)", (len(keys),))

    def _read(self, key: str) -> tuple[bytes, int] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT value, crc, version FROM kv WHERE key = ?", (key,)
            ).fetchone()
        if row is None:
            return None
        value = bytes(row[0])
        if row[1] is None or int(row[1]) != value_checksum(key, value):
            raise MetadataDamagedError(key, str(self.path))
        return value, int(row[2])

    def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None; raises :class:`MetadataDamagedError` if it is
        damaged."""
        found = self._read(key)
        return None if found is None else found[0]

    def get_versioned(self, key: str) -> Versioned | None:
        """The value of ``key`` and its version, or None (damaged: as :meth:`get`)."""
        found = self._read(key)
        return None if found is None else Versioned(*found)

    def put(self, key: str, value: bytes, expected_version: int | None = None) -> int:
        """Create or replace ``key`` if it is at ``expected_version`` (see
        :class:`MetadataStore`); durable when this returns. The new version."""
        return self._write([(key, value)], expected_version)

    def put_many(self, items: Iterable[tuple[str, bytes | None]]) -> None:
        """Apply every write in one transaction; a None value deletes the key."""
        items = list(items)
        if items:
            self._write(items, None)

    def delete(self, key: str, expected_version: int | None = None) -> None:
        """Remove ``key`` (no error if absent) if it is at ``expected_version``."""
        self._write([(key, None)], expected_version)

    def _write(self, items: list[tuple[str, bytes | None]], expected: int | None) -> int:
        """Apply ``items`` in one transaction (``expected``: the version of the only item's
        key); the last version handed out."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                if expected is not None:
                    key = items[0][0]
                    row = db.execute("SELECT version FROM kv WHERE key = ?", (key,)).fetchone()
                    check_version(key, None if row is None else int(row[0]), expected)
                last = int(db.execute("SELECT last FROM kv_version WHERE id = 0").fetchone()[0])
                for key, value in items:
                    if value is None:
                        db.execute("DELETE FROM kv WHERE key = ?", (key,))
                        continue
                    last += 1
                    db.execute(
                        "INSERT OR REPLACE INTO kv (key, value, crc, version) VALUES (?, ?, ?, ?)",
                        (key, value, value_checksum(key, bytes(value)), last),
                    )
                db.execute("UPDATE kv_version SET last = ? WHERE id = 0", (last,))
                if self.faults is not None:
                    self.faults.before_metadata_commit(items)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        return last

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
        self._data: dict[str, Versioned] = {}
        self._last = 0

    def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None."""
        with self._lock:
            found = self._data.get(key)
        return None if found is None else found.value

    def get_versioned(self, key: str) -> Versioned | None:
        """The value of ``key`` and its version, or None."""
        with self._lock:
            return self._data.get(key)

    def put(self, key: str, value: bytes, expected_version: int | None = None) -> int:
        """Create or replace ``key`` if it is at ``expected_version``; the new version."""
        with self._lock:
            found = self._data.get(key)
            check_version(key, None if found is None else found.version, expected_version)
            self._last += 1
            self._data[key] = Versioned(bytes(value), self._last)
            return self._last

    def put_many(self, items: Iterable[tuple[str, bytes | None]]) -> None:
        """Apply every write atomically; a None value deletes the key."""
        items = list(items)
        with self._lock:
            for key, value in items:
                if value is None:
                    self._data.pop(key, None)
                else:
                    self._last += 1
                    self._data[key] = Versioned(bytes(value), self._last)

    def delete(self, key: str, expected_version: int | None = None) -> None:
        """Remove ``key`` (no error if absent) if it is at ``expected_version``."""
        with self._lock:
            found = self._data.get(key)
            check_version(key, None if found is None else found.version, expected_version)
            self._data.pop(key, None)

    def list_children(self, prefix: str) -> list[str]:
        """Sorted names of the direct children of ``prefix`` (see :class:`MetadataStore`)."""
        lo, hi = _child_range(prefix)
        with self._lock:
            keys = sorted(k for k in self._data if lo <= k < hi)
        return _children(lo, keys)

    def close(self) -> None:
        """Nothing to release."""
