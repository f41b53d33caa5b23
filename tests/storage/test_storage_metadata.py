from __future__ import annotations

import threading
from pathlib import Path

import pytest

from starquake.storage import MemoryMetadataStore, MetadataStore, SqliteMetadataStore


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> MetadataStore:
    if request.param == "sqlite":
        s: MetadataStore = SqliteMetadataStore(tmp_path / "m.db")
        request.addfinalizer(s.close)
        return s
    return MemoryMetadataStore()


def test_basic_operations(store: MetadataStore) -> None:
    assert store.get("/a") is None
    store.put("/admin/tenants/public", b"{}")
    store.put("/admin/tenants/other", b"1")
    store.put("/admin/tenants-x", b"2")
    store.put("/admin/namespaces/public/default", b"3")
    assert store.get("/admin/tenants/public") == b"{}"
    assert store.list_children("/admin/tenants") == ["other", "public"]
    assert store.list_children("/admin") == ["namespaces", "tenants", "tenants-x"]
    assert store.list_children("/admin/namespaces") == ["public"]
    assert store.list_children("/nothing") == []
    store.put_many([("/admin/tenants/public", None), ("/k", b"v"), ("/admin/tenants/other", b"9")])
    assert store.get("/admin/tenants/public") is None
    assert store.get("/admin/tenants/other") == b"9"
    store.delete("/k")
    store.delete("/k")
    assert store.get("/k") is None


def test_sqlite_persists_and_is_thread_safe(tmp_path: Path) -> None:
    s = SqliteMetadataStore(tmp_path / "m.db")

    def writer(n: int) -> None:
        for i in range(50):
            s.put_many([(f"/t/{n}/{i}", str(i).encode())])

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s.close()
    s2 = SqliteMetadataStore(tmp_path / "m.db")
    assert s2.list_children("/t") == ["0", "1", "2", "3"]
    assert len(s2.list_children("/t/2")) == 50
    s2.close()
