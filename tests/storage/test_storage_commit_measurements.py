"""What a group commit measures for the broker's metrics: the bytes it wrote and how long each
ledger file's fsync took; and the committer handing each commit to its observers."""

from __future__ import annotations

import errno
from pathlib import Path

from sq_storage_helpers import MakeFactory, run_and_close

from starquake.broker.committer import GroupCommitter
from starquake.storage import (
    InjectedFaults,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    PendingCommit,
    SqliteMetadataStore,
)


def _ledger_bytes(root: Path) -> int:
    """The bytes of the files without the zeros they are preallocated with (the data written
    here ends in none)."""
    return sum(len(p.read_bytes().rstrip(b"\0")) for p in root.rglob("*") if p.is_file())


def test_a_commit_counts_the_bytes_it_wrote_and_times_one_fsync_per_file(
    tmp_path: Path, make_factory: MakeFactory
) -> None:
    factory = make_factory()
    first = factory.open("persistent://public/default/a")
    second = factory.open("persistent://public/default/b")
    for i in range(5):
        first.append(f"a-{i}".encode())
    second.append(b"b" * 1000)
    pending = factory.take_pending()
    assert pending is not None
    assert pending.bytes_written == 0 and pending.sync_seconds == []
    pending.execute()
    pending.finish()

    assert pending.entry_count == 6
    # the first commit to these ledgers wrote whole files: headers, framing and data
    assert pending.bytes_written == _ledger_bytes(tmp_path / "data")
    assert len(pending.sync_seconds) == 2
    assert all(seconds >= 0 for seconds in pending.sync_seconds)

    before = _ledger_bytes(tmp_path / "data")
    first.append(b"one more")
    pending = factory.take_pending()
    assert pending is not None
    pending.execute()
    pending.finish()
    assert pending.bytes_written == _ledger_bytes(tmp_path / "data") - before
    assert len(pending.sync_seconds) == 1


def test_without_journal_sync_nothing_is_timed_but_bytes_are_counted(
    make_factory: MakeFactory,
) -> None:
    factory = make_factory(journal_sync=False)
    ledger = factory.open("persistent://public/default/nosync")
    ledger.append(b"x" * 100)
    pending = factory.take_pending()
    assert pending is not None
    pending.execute()
    pending.finish()
    assert pending.sync_seconds == []
    assert pending.bytes_written > 100


def test_the_committer_shows_each_successful_commit_to_its_observers_and_counts_failures(
    tmp_path: Path,
) -> None:
    faults = InjectedFaults()
    store = SqliteMetadataStore(tmp_path / "meta.db")
    factory = ManagedLedgerFactory(tmp_path / "data", store, ManagedLedgerConfig(), faults=faults)
    seen: list[PendingCommit] = []
    failed: list[BaseException] = []

    def broken_observer(_commit: PendingCommit) -> None:
        raise RuntimeError("an observer that fails must not stop the commits")

    async def run() -> None:
        committer = GroupCommitter(
            factory, lambda _results: None, lambda _ledgers, exc: failed.append(exc)
        )
        committer.observers.append(broken_observer)
        committer.observers.append(seen.append)
        try:
            ledger = factory.open("persistent://public/default/observed")
            for i in range(3):
                ledger.append(f"m-{i}".encode())
            await committer.drain()
            ledger.append(b"m-3")
            await committer.drain()
            assert committer.commits == 2 and committer.failures == 0

            faults.fail_syncs = errno.EIO
            other = factory.open("persistent://public/default/failing")
            other.append(b"lost")
            await committer.drain()
            assert committer.failures == 1
        finally:
            committer.close()

    run_and_close(run, factory, store)
    assert [c.entry_count for c in seen] == [3, 1]  # the failed commit is not observed
    assert all(len(c.sync_seconds) == 1 and c.bytes_written > 0 for c in seen)
    assert len(failed) == 1
