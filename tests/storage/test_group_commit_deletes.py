"""The files of trimmed ledgers are removed beside the group commit, not in it: the commit
that carries a deletion reports its appends while the removal is still under way, the removal
runs in a thread of its own, and ``drain`` waits for it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from sq_storage_helpers import persist, run_and_close

from starquake.broker.committer import GroupCommitter
from starquake.storage import (
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
    SqliteMetadataStore,
    removal,
)

NAME = "persistent://public/default/trimmed"


def test_a_commit_reports_while_its_trimmed_files_are_still_being_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteMetadataStore(tmp_path / "meta.db")
    config = ManagedLedgerConfig(max_entries_per_ledger=2, min_rollover_seconds=0)
    factory = ManagedLedgerFactory(tmp_path / "data", store, config)
    reported: list[Position] = []
    removing = threading.Event()
    release = threading.Event()
    removers: list[str] = []
    remove_file = removal.remove_file

    def held_removal(path: Path) -> None:  # the real removal, once the test lets it go on
        removers.append(threading.current_thread().name)
        removing.set()
        assert release.wait(10)
        remove_file(path)

    monkeypatch.setattr("starquake.storage.commit.remove_file", held_removal)

    report = asyncio.Event()

    def committed(results: Sequence[tuple[ManagedLedger, Position]]) -> None:
        reported.extend(position for _, position in results)
        report.set()

    async def run() -> None:
        committer = GroupCommitter(factory, committed, lambda _ledgers, _exc: None)
        try:
            ml = factory.open(NAME)
            cursor = ml.open_cursor("sub", "earliest")
            for i in range(5):  # ledgers of 2, 2 and 1 entries
                ml.append(bytes([i]))
            await committer.drain()
            first_ledger = ml.ledgers()[0].ledger_id
            doomed = ml._directory / f"{first_ledger}.log"
            assert doomed.exists()
            cursor.mark_delete(Position(first_ledger, 1))
            persist(factory)
            assert ml.trim() == 1  # its files go with the next commit
            report.clear()
            last = ml.append(b"after the trim")
            committer.kick()
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, removing.wait, 10)
            await asyncio.wait_for(report.wait(), 10)  # the receipts, while the removal is held
            assert reported[-1] == last
            assert doomed.exists()
            drained = asyncio.ensure_future(committer.drain())
            await asyncio.sleep(0.05)
            assert not drained.done()  # drain waits for the removal too
            release.set()
            await drained
            assert not doomed.exists()
            assert removers and all(n.startswith("starquake-delete") for n in removers)
        finally:
            release.set()
            committer.close()

    run_and_close(run, factory, store)
