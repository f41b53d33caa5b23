"""A cursor's reads bounded by bytes (the dispatchers' per-round read size): over ledger
rollovers, trimmed ledgers, acknowledged gaps, and entries from the files or from the entry
cache, rounds of bounded reads return exactly what one unbounded read does, each round a
prefix that stops only once the next entry would go past the budget."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from sq_storage_helpers import append_all, commit, persist

from starquake.storage import (
    Entry,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    SqliteMetadataStore,
)
from starquake.storage.read_now import read_now

NAME = "persistent://public/default/read-budget"


def _data(entries: list[Entry]) -> list[bytes]:
    return [bytes(entry.data) for entry in entries]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=30),
    per_ledger=st.integers(1, 6),
    cached=st.booleans(),
    trimmed=st.integers(0, 10),
    acked=st.sets(st.integers(0, 29), max_size=8),
    max_entries=st.integers(1, 12),
    max_bytes=st.integers(1, 100),
)
def test_rounds_of_bounded_reads_return_what_an_unbounded_read_does(
    sizes: list[int],
    per_ledger: int,
    cached: bool,
    trimmed: int,
    acked: set[int],
    max_entries: int,
    max_bytes: int,
) -> None:
    root = Path(tempfile.mkdtemp(prefix="sq-budget-"))
    store = SqliteMetadataStore(root / "meta.db")
    # a tiny cache: every read comes from the ledger files; a large one: from the cache
    config = ManagedLedgerConfig(
        max_entries_per_ledger=per_ledger,
        min_rollover_seconds=0,
        cache_max_bytes=(1 << 24) if cached else 1,
    )
    factory = ManagedLedgerFactory(root / "data", store, config)
    try:
        ml = factory.open(NAME)
        holder = ml.open_cursor("holder", "earliest")
        bounded = ml.open_cursor("bounded", "earliest")
        whole = ml.open_cursor("whole", "earliest")
        datas = [bytes([65 + i % 26]) * size for i, size in enumerate(sizes)]
        positions = append_all(ml, datas)
        commit(factory)
        commit(factory)
        # the first ledgers consumed by every cursor and deleted
        cut = min(trimmed, len(positions) - 1)
        if cut:
            for cursor in (holder, bounded, whole):
                cursor.mark_delete(positions[cut - 1])
            persist(factory)
            ml.trim()
            commit(factory)
        gaps = [positions[i] for i in acked if cut <= i < len(positions)]
        for cursor in (bounded, whole):
            cursor.delete(gaps)
        expected = _data(read_now(whole.read_entries(len(positions) + 1)))
        assert expected == [
            d for i, d in enumerate(datas) if i >= cut and positions[i] not in set(gaps)
        ]
        got: list[bytes] = []
        while True:
            round_ = _data(read_now(bounded.read_entries(max_entries, max_bytes)))
            if not round_:
                break
            assert len(round_) <= max_entries
            assert sum(map(len, round_[:-1])) < max_bytes  # past the budget by one at most
            done = len(got) + len(round_)
            if len(round_) < max_entries and done < len(expected):
                # it stopped early only because the next entry would go past the budget
                assert sum(map(len, round_)) + len(expected[done]) > max_bytes
            got.extend(round_)
        assert got == expected
    finally:
        factory.close()
        store.close()
        shutil.rmtree(root, ignore_errors=True)
