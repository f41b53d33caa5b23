"""``append_many`` is ``append`` of each entry, in one call: two managed ledgers given the same
entries, clock and commits, one entry at a time and in random runs, end up alike - the same
positions reported, the same ledgers (rollovers by entry count, size and age fall between the
same entries), the same bytes read back after a reopen. A fenced or closed ledger takes no entry
of a run. With a cursor reading at the tail, the entries of a run are cached as appended ones are.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sq_storage_helpers import FakeClock, commit

from starquake.storage import (
    EARLIEST,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
    SqliteMetadataStore,
    StorageError,
)

NAME = "tenant/ns/persistent/t"

steps = st.lists(
    st.one_of(
        # records (16-byte header + data) of 20, 40 or 100 bytes: ledgers fill up exactly
        st.tuples(
            st.just("run"), st.lists(st.sampled_from([4, 4, 24, 84]), min_size=1, max_size=9)
        ),
        st.tuples(st.just("advance"), st.sampled_from([0.5, 3.0, 8.0, 30.0])),
        st.tuples(st.just("commit"), st.just(0)),
    ),
    min_size=1,
    max_size=25,
)


class Side:
    """One managed ledger in its own directory, with its own clock."""

    def __init__(self, root: Path, config: ManagedLedgerConfig) -> None:
        root.mkdir()
        self.store = SqliteMetadataStore(root / "meta.db")
        self.clock = FakeClock()
        self.root, self.config = root, config
        self.factory = ManagedLedgerFactory(root / "data", self.store, config, clock=self.clock)
        self.ml = self.factory.open(NAME)

    def read_back(self) -> list[tuple[Position, bytes]]:
        """Every entry, read after closing and reopening the factory."""
        commit(self.factory)
        self.factory.close()
        self.factory = ManagedLedgerFactory(
            self.root / "data", self.store, self.config, clock=self.clock
        )
        self.ml = self.factory.open(NAME)
        entries = asyncio.run(self.ml.read_entries(EARLIEST, 100_000))
        return [(e.position, bytes(e.data)) for e in entries]

    def close(self) -> None:
        self.factory.close()
        self.store.close()


@settings(max_examples=60, deadline=None)
@given(
    steps=steps,
    per_ledger=st.integers(1, 7),
    max_size=st.integers(1, 40).map(lambda k: 16 + 20 * k),  # a file header and k records
    min_roll=st.sampled_from([0.0, 0.0, 5.0]),
    max_roll=st.sampled_from([10.0, 100_000.0]),
)
def test_a_run_lands_as_its_entries_appended_one_by_one(
    steps: list[tuple[str, object]],
    per_ledger: int,
    max_size: int,
    min_roll: float,
    max_roll: float,
) -> None:
    config = ManagedLedgerConfig(
        max_entries_per_ledger=per_ledger,
        max_size_per_ledger_bytes=max_size,
        min_rollover_seconds=min_roll,
        max_rollover_seconds=max_roll,
    )
    with tempfile.TemporaryDirectory() as tmp:
        one, many = Side(Path(tmp) / "one", config), Side(Path(tmp) / "many", config)
        try:
            counter = 0
            for kind, arg in steps:
                if kind == "run":
                    assert isinstance(arg, list)
                    datas = []
                    for size in arg:
                        counter += 1
                        datas.append(counter.to_bytes(4, "big") * (size // 4))
                    singly = [one.ml.append(data) for data in datas]
                    assert many.ml.append_many(datas) == singly
                elif kind == "advance":
                    assert isinstance(arg, float)
                    one.clock.advance(arg)
                    many.clock.advance(arg)
                else:
                    commit(one.factory)
                    commit(many.factory)
                assert many.ml.ledgers() == one.ml.ledgers()
            assert many.read_back() == one.read_back()
        finally:
            one.close()
            many.close()


def test_a_closed_ledger_takes_no_entry_of_a_run(tmp_path: Path) -> None:
    side = Side(tmp_path / "side", ManagedLedgerConfig())
    try:
        side.ml.append(b"before")
        commit(side.factory)
        side.ml.close()
        with pytest.raises(StorageError):
            side.ml.append_many([b"a", b"b"])
        assert commit(side.factory) == []
        assert side.ml.number_of_entries == 1
    finally:
        side.close()


def test_a_run_read_at_the_tail_is_cached(tmp_path: Path) -> None:
    side = Side(tmp_path / "side", ManagedLedgerConfig())
    try:
        side.ml.append_many([b"not", b"cached"])  # no active cursor yet
        assert side.factory.cache.entries == 0
        commit(side.factory)
        cursor = side.ml.open_cursor("reader")
        cursor.set_active()  # a consumer reads at the tail
        side.ml.append_many([b"a", b"bb", b"ccc"])
        assert side.factory.cache.entries == 3
        commit(side.factory)
        entries = asyncio.run(cursor.read_entries(10))
        assert [bytes(e.data) for e in entries] == [b"a", b"bb", b"ccc"]
    finally:
        side.close()
