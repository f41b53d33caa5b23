"""The SQLite metadata store checks every value it hands out, and is checked when opened."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from starquake.storage import (
    ABSENT,
    BadVersionError,
    MetadataDamagedError,
    SqliteMetadataStore,
    StorageError,
)
from starquake.storage.metadata import value_checksum


def _legacy_store(path: Path, items: dict[str, bytes]) -> None:
    """A metadata file as the first format wrote it: no checksums, schema version 0."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID")
        db.executemany("INSERT INTO kv (key, value) VALUES (?, ?)", list(items.items()))


def _raw_update(path: Path, key: str, value: bytes) -> None:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("UPDATE kv SET value = ? WHERE key = ?", (value, key))


def test_values_of_the_previous_format_are_read_and_get_checksums(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    items = {"/managed-ledgers/t/sub": b"\x01\x02cursor", "/admin/policies/a/b": b"{}"}
    _legacy_store(path, items)
    store = SqliteMetadataStore(path)
    assert {k: store.get(k) for k in items} == items
    store.close()
    # migrated once: a later change of a byte is now detected
    _raw_update(path, "/admin/policies/a/b", b"{ ")
    store = SqliteMetadataStore(path)
    assert store.get("/managed-ledgers/t/sub") == items["/managed-ledgers/t/sub"]
    with pytest.raises(MetadataDamagedError, match=r"'/admin/policies/a/b'.*damaged"):
        store.get("/admin/policies/a/b")
    store.close()


@settings(max_examples=60, deadline=None)
@given(
    value=st.binary(min_size=1, max_size=64),
    data=st.data(),
)
def test_any_changed_byte_of_a_value_is_refused(
    tmp_path_factory: pytest.TempPathFactory, value: bytes, data: st.DataObject
) -> None:
    path = tmp_path_factory.mktemp("md") / "metadata.db"
    store = SqliteMetadataStore(path)
    store.put_many([("/k/a", value), ("/k/b", b"other")])
    store.close()
    index = data.draw(st.integers(0, len(value) - 1), label="byte")
    mask = data.draw(st.integers(1, 255), label="xor")
    damaged = bytearray(value)
    damaged[index] ^= mask
    cut = data.draw(st.booleans(), label="also shortened")
    _raw_update(path, "/k/a", bytes(damaged[: index + 1] if cut else damaged))
    store = SqliteMetadataStore(path)
    try:
        with pytest.raises(MetadataDamagedError) as caught:
            store.get("/k/a")
        assert caught.value.key == "/k/a"
        assert store.get("/k/b") == b"other"
    finally:
        store.close()


def test_a_value_moved_to_another_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    store = SqliteMetadataStore(path)
    store.put_many([("/a", b"1"), ("/b", b"2")])
    store.close()
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        crc = db.execute("SELECT crc FROM kv WHERE key = '/a'").fetchone()[0]
        db.execute("UPDATE kv SET value = ?, crc = ? WHERE key = '/b'", (b"1", crc))
    store = SqliteMetadataStore(path)
    with pytest.raises(MetadataDamagedError):
        store.get("/b")
    store.close()


def test_a_file_that_is_not_a_database_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StorageError, match=f"metadata store {path}"):
        SqliteMetadataStore(path)


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    SqliteMetadataStore(path).close()
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("PRAGMA user_version = 7")
    with pytest.raises(StorageError, match="schema version 7"):
        SqliteMetadataStore(path)


def test_a_file_of_schema_1_gets_versions_that_persist(tmp_path: Path) -> None:
    """Schema 1 (checksums, no versions) is migrated: every value gets a version, new writes
    get greater ones, and the versions survive a reopen."""
    path = tmp_path / "metadata.db"
    items = {"/admin/tenants/a": b"{}", "/managed-ledgers/t": b"\x00ml"}
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(
            "CREATE TABLE kv (key TEXT PRIMARY KEY, value BLOB NOT NULL, crc INTEGER) WITHOUT ROWID"
        )
        db.executemany(
            "INSERT INTO kv (key, value, crc) VALUES (?, ?, ?)",
            [(k, v, value_checksum(k, v)) for k, v in items.items()],
        )
        db.execute("PRAGMA user_version = 1")
    store = SqliteMetadataStore(path)
    found = {k: store.get_versioned(k) for k in items}
    assert {k: v.value for k, v in found.items() if v is not None} == items
    versions = sorted(v.version for v in found.values() if v is not None)
    assert len(set(versions)) == 2 and versions[0] >= 1
    with pytest.raises(BadVersionError):
        store.put("/admin/tenants/a", b"{1}", ABSENT)
    tenant = found["/admin/tenants/a"]
    assert tenant is not None
    with pytest.raises(BadVersionError):
        store.put("/admin/tenants/a", b"{1}", tenant.version + 1)
    new = store.put("/admin/tenants/a", b"{1}", tenant.version)
    store.close()
    store = SqliteMetadataStore(path)
    assert store.get_versioned("/admin/tenants/a") == (b"{1}", new)
    assert new > versions[-1]
    assert store.put("/other", b"x") > new
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2
