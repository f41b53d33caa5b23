"""One metadata store made of two: the keys under the shared prefixes go to the shared store,
every other key to the local one, and listings merge both."""

from __future__ import annotations

import pytest

from starquake.storage import ABSENT, BadVersionError, MemoryMetadataStore
from starquake.storage.routed_metadata import RoutedMetadataStore


def test_keys_go_to_the_store_of_their_prefix() -> None:
    local, shared = MemoryMetadataStore(), MemoryMetadataStore()
    store = RoutedMetadataStore(local, shared, ["/admin/tenants", "/schemas/"])
    version = store.put("/admin/tenants/a", b"{}", ABSENT)
    store.put("/admin/tenantsx", b"local")  # a prefix is a whole path segment
    store.put_many([("/managed-ledgers/t", b"ml"), ("/schemas/a/b/t/0", b"s")])
    assert shared.get("/admin/tenants/a") == b"{}" and local.get("/admin/tenants/a") is None
    assert local.get("/admin/tenantsx") == b"local"
    assert (local.get("/managed-ledgers/t"), shared.get("/schemas/a/b/t/0")) == (b"ml", b"s")
    assert store.get_versioned("/admin/tenants/a") == (b"{}", version)
    with pytest.raises(BadVersionError):
        store.put("/admin/tenants/a", b"{}", ABSENT)
    assert store.list_children("/") == ["admin", "managed-ledgers", "schemas"]
    assert store.list_children("/admin") == ["tenants", "tenantsx"]
    assert store.list_children("/admin/tenants") == ["a"]
    store.delete("/admin/tenants/a", version)
    assert shared.get("/admin/tenants/a") is None
