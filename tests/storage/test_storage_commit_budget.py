"""A group commit takes at most ``commit_max_bytes`` of appends (at least one entry): the rest
waits for the next commit, other ledgers get their turn first, a sealed ledger is written
whole, and what a commit took becomes readable when it finishes, in order."""

from __future__ import annotations

from pathlib import Path

from sq_storage_helpers import commit, open_factory

from starquake.storage import (
    EARLIEST,
    ManagedLedgerFactory,
    Position,
)
from starquake.storage.segment import LEDGER_RECORD_HEADER_SIZE

RECORD = 10_000
SIZE = RECORD - LEDGER_RECORD_HEADER_SIZE  # payload of a 10,000-byte record


def _readable(factory: ManagedLedgerFactory, name: str) -> list[Position]:
    return [e.position for e in factory.open(name).read_entries_now(EARLIEST, 1000)]


def test_appends_span_commits_within_the_budget_in_order(tmp_path: Path) -> None:
    factory, store = open_factory(tmp_path, commit_max_bytes=3 * RECORD + 100)
    ml = factory.open("a")
    positions = [ml.append(bytes([i]) * SIZE) for i in range(10)]
    seen = []
    while (pending := factory.take_pending()) is not None:
        assert pending.entry_count <= 3
        pending.execute()
        pending.finish()
        seen.append(len(_readable(factory, "a")))
    assert seen == [3, 6, 9, 10]
    assert ml.last_confirmed == positions[-1]
    factory.close()
    store.close()
    factory, store = open_factory(tmp_path)
    assert [e.data[0] for e in factory.open("a").read_entries_now(EARLIEST, 100)] == list(range(10))
    factory.close()
    store.close()


def test_a_record_larger_than_the_budget_is_committed_alone(tmp_path: Path) -> None:
    factory, store = open_factory(tmp_path, commit_max_bytes=100)
    ml = factory.open("a")
    first = ml.append(b"x" * SIZE)
    ml.append(b"y" * SIZE)
    commit(factory)
    assert ml.last_confirmed == first
    commit(factory)
    assert len(_readable(factory, "a")) == 2
    factory.close()
    store.close()


def test_a_ledger_left_over_waits_behind_the_others(tmp_path: Path) -> None:
    factory, store = open_factory(tmp_path, commit_max_bytes=2 * RECORD)
    big, small = factory.open("big"), factory.open("small")
    for _ in range(6):
        big.append(b"b" * SIZE)
    small.append(b"s" * SIZE)
    commit(factory)  # the budget goes to "big" (first in line)
    assert _readable(factory, "small") == []
    commit(factory)  # "small" is served before the rest of "big"
    assert len(_readable(factory, "small")) == 1
    assert 1 <= len(_readable(factory, "big")) < 6
    while commit(factory):
        pass
    assert len(_readable(factory, "big")) == 6
    factory.close()
    store.close()


def test_a_sealed_ledger_is_committed_whole(tmp_path: Path) -> None:
    factory, store = open_factory(
        tmp_path, commit_max_bytes=RECORD, max_entries_per_ledger=5, min_rollover_seconds=0
    )
    ml = factory.open("a")
    positions = [ml.append(bytes([i]) * SIZE) for i in range(8)]  # the 6th rolls over
    assert positions[5].ledger_id != positions[4].ledger_id
    commit(factory)
    # the first ledger was sealed before this commit: all five of its entries at once
    assert _readable(factory, "a") == positions[:5]
    while commit(factory):
        pass
    assert _readable(factory, "a") == positions
    factory.close()
    store.close()
