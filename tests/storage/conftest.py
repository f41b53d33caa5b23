from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sq_storage_helpers import FakeClock, MakeFactory

from starquake.storage import ManagedLedgerConfig, ManagedLedgerFactory, SqliteMetadataStore


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_factory(tmp_path: Path, clock: FakeClock) -> Iterator[MakeFactory]:
    """Build factories on tmp_path (same data dir and metadata each time: a "restart")."""
    created: list[tuple[ManagedLedgerFactory, SqliteMetadataStore]] = []

    def make(**config: Any) -> ManagedLedgerFactory:
        store = SqliteMetadataStore(tmp_path / "meta.db")
        factory = ManagedLedgerFactory(
            tmp_path / "data", store, ManagedLedgerConfig(**config), clock=clock
        )
        created.append((factory, store))
        return factory

    yield make
    for factory, store in created:
        factory.close()
        store.close()
