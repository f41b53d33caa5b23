"""Helpers shared by the storage tests."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

from starquake.storage import (
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
    SqliteMetadataStore,
)

MakeFactory = Callable[..., ManagedLedgerFactory]
_T = TypeVar("_T")


def run_and_close(
    main: Callable[[], Coroutine[Any, Any, _T]],
    factory: ManagedLedgerFactory,
    store: SqliteMetadataStore,
) -> _T:
    """``asyncio.run(main())``, then close the factory and its metadata store, whatever
    happened."""
    try:
        return asyncio.run(main())
    finally:
        factory.close()
        store.close()


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def open_factory(
    root: Path, **config: int | float
) -> tuple[ManagedLedgerFactory, SqliteMetadataStore]:
    """A factory in ``root`` (created if need be) with its own metadata store and a fake
    clock; ``config``: ManagedLedgerConfig fields."""
    root.mkdir(exist_ok=True)
    store = SqliteMetadataStore(root / "meta.db")
    factory = ManagedLedgerFactory(
        root / "data",
        store,
        ManagedLedgerConfig(**config),  # type: ignore[arg-type]
        clock=FakeClock(),
    )
    return factory, store


def commit(factory: ManagedLedgerFactory) -> list[tuple[ManagedLedger, Position]]:
    """Run one whole group commit synchronously."""
    pending = factory.take_pending()
    if pending is None:
        return []
    pending.execute()
    return pending.finish()


def append_all(ml: ManagedLedger, datas: list[bytes]) -> list[Position]:
    return [ml.append(d) for d in datas]


def persist(factory: ManagedLedgerFactory) -> None:
    """Store the durable cursors' changes, as the broker's periodic flush does."""
    snapshots = factory.take_cursor_snapshots()
    factory.metadata.put_many(snapshots)
    factory.cursor_snapshots_written(snapshots)


def close_like_a_crash(factory: ManagedLedgerFactory, ledgers: Iterable[ManagedLedger]) -> None:
    """Close the ledger files of ``factory`` without writing anything, as the death of its
    process would (a crash test that only drops the factory leaks its descriptors)."""
    for ledger in ledgers:
        for state in ledger._states.values():  # type: ignore[attr-defined]
            if state.fd >= 0:
                os.close(state.fd)
                state.fd = -1
    factory.files.close_reads()
