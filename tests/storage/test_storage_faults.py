"""Failure handling of the commit path and the metadata store, through the fault seam."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from starquake.storage import (
    EARLIEST,
    Entry,
    InjectedFaults,
    LedgerFencedError,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    SqliteMetadataStore,
)
from starquake.storage.segment import LEDGER_RECORD_HEADER_SIZE

NAME = "persistent://public/default/faults"
DATAS = [b"first entry", b"second entry!", b"third entry, a bit longer"]
LAST = b"the entry being written when it all went wrong"


class Node:
    """One "machine": a factory and its metadata store over a data directory."""

    def __init__(self, root: Path, faults: InjectedFaults | None = None) -> None:
        self.store = SqliteMetadataStore(root / "meta.db", faults)
        self.factory = ManagedLedgerFactory(
            root / "data", self.store, ManagedLedgerConfig(), faults=faults
        )

    def crash(self) -> None:
        """Lose everything in memory; close descriptors as the kernel would."""
        self.store.close()


def _commit(factory: ManagedLedgerFactory) -> None:
    pending = factory.take_pending()
    assert pending is not None
    pending.execute()
    pending.finish()


def _stored(root: Path) -> list[Entry]:
    node = Node(root)
    try:
        return node.factory.open(NAME).read_entries_now(EARLIEST, 100)
    finally:
        node.factory.close()
        node.store.close()


def _torn_lengths() -> range:
    return range(0, LEDGER_RECORD_HEADER_SIZE + len(LAST))


@pytest.mark.parametrize("keep", _torn_lengths())
def test_a_torn_last_entry_loses_only_itself(tmp_path: Path, keep: int) -> None:
    faults = InjectedFaults()
    node = Node(tmp_path, faults)
    ml = node.factory.open(NAME)
    positions = [ml.append(d) for d in DATAS]
    _commit(node.factory)
    ml.append(LAST)
    faults.tear_after = keep  # only `keep` bytes of the record reach the file
    pending = node.factory.take_pending()
    assert pending is not None
    with pytest.raises(OSError):
        pending.execute()
    pending.fail(OSError(errno.EIO, "torn"))
    with pytest.raises(LedgerFencedError):
        ml.append(b"refused")
    node.crash()

    assert _stored(tmp_path) == [Entry(p, d) for p, d in zip(positions, DATAS, strict=True)]
    quarantined = list((tmp_path / "data").glob("*/quarantine/*"))
    assert len(quarantined) == (1 if keep else 0)


@pytest.mark.parametrize("where", ["write", "sync"])
@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC])
def test_a_failed_commit_fences_then_the_ledger_recovers(
    tmp_path: Path, where: str, code: int
) -> None:
    faults = InjectedFaults()
    node = Node(tmp_path, faults)
    ml = node.factory.open(NAME)
    positions = [ml.append(d) for d in DATAS]
    _commit(node.factory)
    ml.append(LAST)
    if where == "write":
        faults.fail_writes = code
    else:
        faults.fail_syncs = code
    pending = node.factory.take_pending()
    assert pending is not None
    with pytest.raises(OSError) as failure:
        pending.execute()
    assert failure.value.errno == code
    assert pending.fail(failure.value) == [ml]
    assert ml.fenced
    with pytest.raises(LedgerFencedError):
        ml.append(b"refused while fenced")
    # the fault clears: reopening recovers from disk; the unacknowledged entry is not there,
    # even when its bytes reached the file (a failed fsync)
    faults.clear()
    ml = node.factory.open(NAME)
    assert not ml.fenced
    expected = [Entry(p, d) for p, d in zip(positions, DATAS, strict=True)]
    assert ml.read_entries_now(EARLIEST, 100) == expected
    new = ml.append(b"after the fault")
    _commit(node.factory)
    node.factory.close()
    node.store.close()
    assert _stored(tmp_path) == [*expected, Entry(new, b"after the fault")]


def test_a_failed_metadata_commit_changes_nothing_and_is_retried(tmp_path: Path) -> None:
    faults = InjectedFaults()
    node = Node(tmp_path, faults)
    ml = node.factory.open(NAME)
    positions = [ml.append(d) for d in DATAS]
    _commit(node.factory)
    cursor = ml.open_cursor("sub", "earliest")
    node.store.put_many(node.factory.take_cursor_snapshots())
    cursor.mark_delete(positions[1])
    faults.fail_metadata = errno.EIO
    snapshots = node.factory.take_cursor_snapshots()
    with pytest.raises(OSError):
        node.store.put_many(snapshots)
    node.factory.cursor_snapshots_failed(snapshots)
    # nothing of the failed transaction is visible
    assert b'"md":[0,1]' not in (node.store.get(cursor.key) or b"")
    faults.clear()
    retry = node.factory.take_cursor_snapshots()  # the failed state is written again
    assert retry == snapshots
    node.store.put_many(retry)
    node.factory.cursor_snapshots_written(retry)
    node.crash()
    node = Node(tmp_path)
    assert node.factory.open(NAME).cursors["sub"].mark_delete_position == positions[1]
    node.factory.close()
    node.store.close()


@pytest.mark.parametrize("sync", [True, False])
def test_journal_sync_data_decides_whether_appends_are_fsynced(tmp_path: Path, sync: bool) -> None:
    faults = InjectedFaults()
    store = SqliteMetadataStore(tmp_path / "meta.db")
    factory = ManagedLedgerFactory(
        tmp_path / "data", store, ManagedLedgerConfig(journal_sync=sync), faults=faults
    )
    ml = factory.open(NAME)
    position = ml.append(b"entry")
    _commit(factory)
    assert faults.syncs == (1 if sync else 0)
    assert ml.read_entries_now(EARLIEST, 10) == [Entry(position, b"entry")]
    factory.close()
    store.close()


def test_commits_retried_on_a_full_disk_reuse_the_ledger_they_failed_on(tmp_path: Path) -> None:
    faults = InjectedFaults()
    node = Node(tmp_path, faults)
    ml = node.factory.open(NAME)
    stored = ml.append(DATAS[0])
    _commit(node.factory)
    faults.fail_writes = errno.ENOSPC
    ledgers = []
    for _ in range(6):  # the broker reopens the fenced ledger at each producer's retry
        ml = node.factory.open(NAME)
        ledgers.append(ml.append(LAST).ledger_id)
        pending = node.factory.take_pending()
        assert pending is not None
        with pytest.raises(OSError):
            pending.execute()
        pending.fail(OSError(errno.ENOSPC, "full"))
    # the first retry fails in the ledger that holds the stored entry, every later one in the
    # same new (empty) ledger: no new ledger id per retry
    assert ledgers[0] == stored.ledger_id
    assert len(set(ledgers[1:])) == 1, ledgers
    assert node.factory.allocate_ledger_id() == ledgers[1] + 1
    faults.clear()
    ml = node.factory.open(NAME)
    after = ml.append(LAST)
    _commit(node.factory)
    assert after.ledger_id == ledgers[1]
    node.factory.close()
    node.store.close()
    assert _stored(tmp_path) == [Entry(stored, DATAS[0]), Entry(after, LAST)]
