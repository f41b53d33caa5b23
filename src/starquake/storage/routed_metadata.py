"""One metadata store made of two: the keys under some prefixes live in a *shared* store, all
others in a *local* one.

A broker with ``configurationMetadataStoreUrl`` set keeps its configuration metadata (tenants,
namespaces, policies, partitioned topics, schemas) in the store all brokers share, and its
managed-ledger and cursor state, ledger ids and other per-broker keys in its local SQLite file.
Each key lives in exactly one of the two, chosen by its path; a ``put_many`` that touches both
is one transaction per store, not one for all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .metadata import MetadataStore, Versioned

__all__ = ["RoutedMetadataStore"]


class RoutedMetadataStore:
    """A :class:`MetadataStore` sending the keys under ``shared_prefixes`` to ``shared`` and
    the rest to ``local``."""

    def __init__(
        self, local: MetadataStore, shared: MetadataStore, shared_prefixes: Sequence[str]
    ) -> None:
        self.local = local
        self.shared = shared
        self._prefixes = tuple(p.rstrip("/") for p in shared_prefixes)

    def _is_shared(self, key: str) -> bool:
        return any(key == p or key.startswith(p + "/") for p in self._prefixes)

    def _store(self, key: str) -> MetadataStore:
        return self.shared if self._is_shared(key) else self.local

    def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None."""
        return self._store(key).get(key)

    def get_versioned(self, key: str) -> Versioned | None:
        """The value of ``key`` and its version, or None."""
        return self._store(key).get_versioned(key)

    def put(self, key: str, value: bytes, expected_version: int | None = None) -> int:
        """Create or replace ``key`` (compare-and-set as :class:`MetadataStore`)."""
        return self._store(key).put(key, value, expected_version)

    def put_many(self, items: Iterable[tuple[str, bytes | None]]) -> None:
        """Apply the writes: one transaction per store."""
        local: list[tuple[str, bytes | None]] = []
        shared: list[tuple[str, bytes | None]] = []
        for item in items:
            (shared if self._is_shared(item[0]) else local).append(item)
        if local:
            self.local.put_many(local)
        if shared:
            self.shared.put_many(shared)

    def delete(self, key: str, expected_version: int | None = None) -> None:
        """Remove ``key`` (compare-and-set as :class:`MetadataStore`)."""
        self._store(key).delete(key, expected_version)

    def list_children(self, prefix: str) -> list[str]:
        """The direct children of ``prefix`` in either store."""
        if self._is_shared(prefix):
            return self.shared.list_children(prefix)
        base = prefix.rstrip("/") + "/"
        children = set(self.local.list_children(prefix))
        if any(p.startswith(base) for p in self._prefixes):
            children.update(self.shared.list_children(prefix))
        return sorted(children)

    def close(self) -> None:
        """Close both stores."""
        try:
            self.shared.close()
        finally:
            self.local.close()
