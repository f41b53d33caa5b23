"""The group committer writes the next commits while earlier ones are being fsynced (one write
thread, one fsync thread, up to PIPELINE_DEPTH commits under way); commits still complete in
order, and when an fsync fails the commits taken behind it fail too: their bytes follow lost
ones, so none of them is acknowledged."""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from sq_storage_helpers import run_and_close

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
    tmp_path: Path, faults: StorageFaults, rounds: list[int], *, journal_sync: bool = True
) -> tuple[list[Position], list[Position], list[BaseException], list[bytes]]:
    """Append rounds of records to one ledger (draining after each round), committed in commits
    of two records; returns the appended positions, the confirmed positions reported in order,
    the failures reported, and the entries the ledger holds when opened again."""
    store = SqliteMetadataStore(tmp_path / "meta.db")
    config = ManagedLedgerConfig(commit_max_bytes=2 * RECORD, journal_sync=journal_sync)
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
            positions: list[Position] = []
            for count in rounds:
                for _ in range(count):
                    positions.append(ledger.append(bytes([len(positions)]) * SIZE))
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

    positions, stored = run_and_close(run, factory, store)
    return positions, confirmed, failures, stored


def test_the_next_commit_is_written_during_an_fsync_and_commits_complete_in_order(
    tmp_path: Path,
) -> None:
    faults = FirstSyncWaitsForTheNextWrite()
    positions, confirmed, failures, stored = _run(tmp_path, faults, [9])
    assert faults.written_during_sync.is_set()
    assert failures == []
    # one report per commit of two records (the last one alone), in order
    assert confirmed == [positions[i] for i in (1, 3, 5, 7, 8)]
    assert stored == [bytes([i]) * SIZE for i in range(9)]


def test_when_an_fsync_fails_the_commits_written_behind_it_fail_too(tmp_path: Path) -> None:
    assert PIPELINE_DEPTH >= 3  # all three commits are taken before the first fsync ends
    faults = FirstSyncWaitsForTheNextWrite(fail_first=errno.EIO)
    positions, confirmed, failures, stored = _run(tmp_path, faults, [6])
    assert faults.written_during_sync.is_set()
    assert len(positions) == 6 and confirmed == []  # none acknowledged after the failure
    assert len(failures) == 3  # the failed commit, then the two written during its fsync
    assert all(isinstance(exc, OSError) and exc.errno == errno.EIO for exc in failures)
    # the bytes of all three commits reached the file, never acknowledged: reopened, the fenced
    # ledger ends at its last acknowledged entry
    assert stored == []


class NotesWrites(StorageFaults):
    """Notes the thread of each write; the first fsync takes ``hold`` seconds, and the writes
    made meanwhile are counted."""

    def __init__(self, hold: float = 0.0) -> None:
        self.hold = hold
        self.threads: list[str] = []
        self.sync_threads: list[str] = []
        self.during_first_sync = 0
        self.syncs = 0
        self._syncing = False
        self._synced = 0

    def before_write(self, path: Path, offset: int, data: bytes) -> bytes:
        self.threads.append(threading.current_thread().name.split("_")[0])
        if self._syncing:
            self.during_first_sync += 1
        return data

    def before_sync(self, path: Path) -> None:
        self.sync_threads.append(threading.current_thread().name.split("_")[0])
        self._synced += 1
        self.syncs = self._synced
        if self._synced == 1 and self.hold:
            self._syncing = True
            time.sleep(self.hold)
            self._syncing = False


def test_at_most_pipeline_depth_commits_are_under_way(tmp_path: Path) -> None:
    """Twelve records in commits of two: while the first commit's fsync is held, the next
    PIPELINE_DEPTH - 1 commits are written, and no more until it completes; those are then
    made durable by one fsync (the six commits take at most four)."""
    assert PIPELINE_DEPTH == 4
    faults = NotesWrites(hold=0.5)
    _, confirmed, failures, stored = _run(tmp_path, faults, [12])
    assert faults.during_first_sync == PIPELINE_DEPTH - 1
    assert 2 <= faults.syncs <= 4
    assert failures == [] and len(confirmed) == 6
    assert stored == [bytes([i]) * SIZE for i in range(12)]


def test_without_fsync_the_loop_writes_small_commits_itself(tmp_path: Path) -> None:
    """journal_sync off: a commit that only writes entries is written by the loop (the first
    one also creates the ledger's directory: the write thread does that one); with fsync,
    every write is made by the write thread."""
    faults = NotesWrites()
    _, confirmed, failures, stored = _run(tmp_path, faults, [2, 2, 2], journal_sync=False)
    assert faults.threads == ["starquake-write", "MainThread", "MainThread"]
    assert failures == [] and len(confirmed) == 3
    assert stored == [bytes([i]) * SIZE for i in range(6)]
    durable = NotesWrites()
    (tmp_path / "durable").mkdir()
    assert _run(tmp_path / "durable", durable, [2, 2, 2])[2] == []
    assert durable.threads == ["starquake-write"] * 3


def test_a_commit_alone_under_way_is_written_and_fsynced_by_the_write_thread(
    tmp_path: Path,
) -> None:
    """One commit at a time (drained after each): the write thread writes and fsyncs it, with
    no hand-off to the fsync thread; commits taken together are fsynced by the fsync thread."""
    alone = NotesWrites()
    _, confirmed, failures, stored = _run(tmp_path, alone, [2, 2, 2])
    assert failures == [] and len(confirmed) == 3
    assert alone.threads == ["starquake-write"] * 3
    assert alone.sync_threads and set(alone.sync_threads) == {"starquake-write"}
    assert stored == [bytes([i]) * SIZE for i in range(6)]
    together = NotesWrites()
    (tmp_path / "together").mkdir()
    _, confirmed, failures, stored = _run(tmp_path / "together", together, [8])
    assert failures == [] and len(confirmed) == 4
    assert "starquake-fsync" in together.sync_threads
    assert stored == [bytes([i]) * SIZE for i in range(8)]
