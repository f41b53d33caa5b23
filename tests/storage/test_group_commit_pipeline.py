"""The group committer writes the next commits while earlier ones are being fsynced (one write
thread, one fsync thread, up to PIPELINE_DEPTH commits under way); commits still complete in
order, and when an fsync fails the commits taken behind it fail too: their bytes follow lost
ones, so none of them is acknowledged."""

from __future__ import annotations

import asyncio
import errno
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from starquake.broker.committer import PIPELINE_DEPTH, GroupCommitter
from starquake.storage import (
    EARLIEST,
    LedgerFencedError,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
    SqliteMetadataStore,
    StorageFaults,
)
from starquake.storage.segment import LEDGER_RECORD_HEADER_SIZE

NAME = "persistent://public/default/pipeline"
RECORD = 10_000
SIZE = RECORD - LEDGER_RECORD_HEADER_SIZE


class FirstSyncWaitsForTheNextWrite(StorageFaults):
    """The first fsync waits until a later write started (at most 10 s), then fails with
    ``fail_first`` if set: shows that the next commit is written during an fsync."""

    def __init__(self, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.writes = 0
        self.written_during_sync = threading.Event()
        self._syncing = False
        self._synced = 0

    def before_write(self, path: Path, offset: int, data: bytes) -> bytes:
        self.writes += 1
        if self._syncing:
            self.written_during_sync.set()
        return data

    def before_sync(self, path: Path) -> None:
        self._synced += 1
        if self._synced != 1:
            return
        self._syncing = True
        self.written_during_sync.wait(10)
        self._syncing = False
        if self.fail_first:
            raise OSError(self.fail_first, "fsync failed (injected)")


def _run(
    tmp_path: Path, faults: FirstSyncWaitsForTheNextWrite, count: int
) -> tuple[list[Position], list[Position], list[BaseException], list[bytes]]:
    """Append ``count`` records to one ledger and commit them in commits of two records;
    returns the appended positions, the confirmed positions reported in order, the failures
    reported, and the entries the ledger holds when opened again."""
    store = SqliteMetadataStore(tmp_path / "meta.db")
    config = ManagedLedgerConfig(commit_max_bytes=2 * RECORD)
    factory = ManagedLedgerFactory(tmp_path / "data", store, config, faults=faults)
    confirmed: list[Position] = []
    failures: list[BaseException] = []

    def committed(results: Sequence[tuple[ManagedLedger, Position]]) -> None:
        confirmed.extend(position for _, position in results)

    def failed(_ledgers: Sequence[ManagedLedger], exc: BaseException) -> None:
        failures.append(exc)

    async def run() -> tuple[list[Position], list[bytes]]:
        committer = GroupCommitter(factory, committed, failed)
        try:
            ledger = factory.open(NAME)
            positions = [ledger.append(bytes([i]) * SIZE) for i in range(count)]
            await committer.drain()
            if failures:
                with pytest.raises(LedgerFencedError):
                    ledger.append(b"refused")
            ledger.close()
            await committer.drain()
            reopened = factory.open(NAME)  # a fenced ledger is reopened to take appends again
            return positions, [bytes(e.data) for e in reopened.read_entries_now(EARLIEST, 100)]
        finally:
            committer.close()

    try:
        positions, stored = asyncio.run(run())
    finally:
        factory.close()
        store.close()
    return positions, confirmed, failures, stored


def test_the_next_commit_is_written_during_an_fsync_and_commits_complete_in_order(
    tmp_path: Path,
) -> None:
    faults = FirstSyncWaitsForTheNextWrite()
    positions, confirmed, failures, stored = _run(tmp_path, faults, 9)
    assert faults.written_during_sync.is_set()
    assert failures == []
    # one report per commit of two records (the last one alone), in order
    assert confirmed == [positions[i] for i in (1, 3, 5, 7, 8)]
    assert stored == [bytes([i]) * SIZE for i in range(9)]


def test_when_an_fsync_fails_the_commits_written_behind_it_fail_too(tmp_path: Path) -> None:
    assert PIPELINE_DEPTH >= 3  # all three commits are taken before the first fsync ends
    faults = FirstSyncWaitsForTheNextWrite(fail_first=errno.EIO)
    positions, confirmed, failures, stored = _run(tmp_path, faults, 6)
    assert faults.written_during_sync.is_set()
    assert len(positions) == 6 and confirmed == []  # none acknowledged after the failure
    assert len(failures) == 3  # the failed commit, then the two written during its fsync
    assert all(isinstance(exc, OSError) and exc.errno == errno.EIO for exc in failures)
    # the bytes of all three commits reached the file, never acknowledged: reopened, the fenced
    # ledger ends at its last acknowledged entry
    assert stored == []
