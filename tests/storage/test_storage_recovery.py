from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from sq_storage_helpers import FakeClock, commit

from starquake.storage import (
    EARLIEST,
    Entry,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
    SqliteMetadataStore,
)
from starquake.storage.segment import LEDGER_RECORD_HEADER_SIZE

NAME = "persistent://public/default/recovery"
HEADER = 16
RECORD_HEADER = LEDGER_RECORD_HEADER_SIZE


class Env:
    def __init__(self, root: Path, **config: int | float) -> None:
        self.root = root
        self.config = ManagedLedgerConfig(**config)  # type: ignore[arg-type]
        self.clock = FakeClock()
        self.store: SqliteMetadataStore | None = None
        self.factory: ManagedLedgerFactory | None = None

    def start(self) -> ManagedLedgerFactory:
        self.store = SqliteMetadataStore(self.root / "meta.db")
        self.factory = ManagedLedgerFactory(
            self.root / "data", self.store, self.config, clock=self.clock
        )
        return self.factory

    def stop(self) -> None:
        assert self.factory is not None and self.store is not None
        self.factory.close()
        self.store.close()


batches = st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=8), max_size=8)


@settings(max_examples=40, deadline=None)
@given(batches, st.lists(st.booleans(), max_size=8), st.integers(1, 6))
def test_append_commit_reopen_round_trip(
    plan: list[list[bytes]], reopen_after: list[bool], per_ledger: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = Env(Path(tmp), max_entries_per_ledger=per_ledger, min_rollover_seconds=0)
        ml = env.start().open(NAME)
        expected: list[Entry] = []
        for i, batch in enumerate(plan):
            for data in batch:
                expected.append(Entry(ml.append(data), data))
            assert env.factory is not None
            commit(env.factory)
            assert ml.read_entries_now(EARLIEST, 1000) == expected
            if i < len(reopen_after) and reopen_after[i]:
                env.stop()
                ml = env.start().open(NAME)
                assert ml.read_entries_now(EARLIEST, 1000) == expected
                assert ml.last_confirmed == (
                    expected[-1].position if expected else Position(ml.current_ledger_id, -1)
                )
        env.stop()
        ml = env.start().open(NAME)
        assert ml.read_entries_now(EARLIEST, 1000) == expected
        assert ml.count_entries(EARLIEST, ml.last_confirmed) == len(expected)
        env.stop()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.binary(min_size=0, max_size=30), min_size=1, max_size=25),
    st.integers(2, 30),
    st.sampled_from(["truncate", "corrupt"]),
    st.floats(0, 1, exclude_max=True),
    st.integers(1, 255),
    st.integers(1, 60),
)
def test_damaged_last_ledger_recovers_prefix(
    datas: list[bytes], per_ledger: int, mode: str, where: float, xor: int, budget: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = Env(Path(tmp), max_entries_per_ledger=per_ledger, min_rollover_seconds=0)
        ml = env.start().open(NAME)
        positions = [ml.append(d) for d in datas]
        assert env.factory is not None
        commit(env.factory)
        directory = ml._directory
        env.stop()
        last_ledger = positions[-1].ledger_id
        # a crash leaves no index for the ledger that was being written
        (directory / f"{last_ledger}.idx").unlink(missing_ok=True)
        path = directory / f"{last_ledger}.log"
        size = path.stat().st_size
        offset = int(where * size)
        if mode == "truncate":
            os.truncate(path, offset)
        else:
            raw = bytearray(path.read_bytes())
            raw[offset] ^= xor
            path.write_bytes(bytes(raw))
        keep = [i for i, p in enumerate(positions) if p.ledger_id != last_ledger]
        end = HEADER
        for i, p in enumerate(positions):
            if p.ledger_id != last_ledger:
                continue
            start, end = end, end + RECORD_HEADER + len(datas[i])
            if mode == "truncate":
                # records that lie entirely before the cut survive
                if end > offset:
                    break
                keep.append(i)
            elif offset < start or offset >= end:
                # a flipped byte costs exactly the record it hit (none if it hit the header)
                keep.append(i)
        expected = [Entry(positions[i], datas[i]) for i in keep]

        ml = env.start().open(NAME)
        assert ml.read_entries_now(EARLIEST, 1000) == expected
        # reads bounded by bytes, round after round, across the ledgers and the cut tail
        rounds: list[Entry] = []
        start = ml.normalize(EARLIEST)
        while batch := ml.read_entries_now(start, 4, max_bytes=budget):
            assert sum(len(e.data) for e in batch[:-1]) <= budget
            rounds.extend(batch)
            start = ml.next_position(batch[-1].position)
        assert rounds == expected
        if expected:
            assert ml.last_confirmed == expected[-1].position
        new = ml.append(b"after recovery")
        assert new.ledger_id > last_ledger
        commit(env.factory)
        env.stop()
        ml = env.start().open(NAME)
        assert ml.read_entries_now(EARLIEST, 1000) == [*expected, Entry(new, b"after recovery")]
        env.stop()


def test_index_files_are_used_and_validated(tmp_path: Path) -> None:
    env = Env(tmp_path, max_entries_per_ledger=3, min_rollover_seconds=0)
    ml = env.start().open(NAME)
    datas = [bytes([i]) * 5 for i in range(10)]
    positions = [ml.append(d) for d in datas]
    assert env.factory is not None
    commit(env.factory)
    directory = ml._directory
    env.stop()
    idx = sorted(directory.glob("*.idx"))
    assert len(idx) == 4  # three sealed by rollover, one sealed by the clean close
    # a damaged index is ignored (the ledger is scanned instead) and rewritten
    raw = bytearray(idx[0].read_bytes())
    raw[20] ^= 0xFF
    idx[0].write_bytes(bytes(raw))
    (directory / "999999.idx").write_bytes(b"orphan")
    (directory / "5.idx.tmp").write_bytes(b"partial")
    ml = env.start().open(NAME)
    assert [e.data for e in ml.read_entries_now(EARLIEST, 100)] == datas
    assert [e.position for e in ml.read_entries_now(EARLIEST, 100)] == positions
    assert not (directory / "999999.idx").exists()
    assert not (directory / "5.idx.tmp").exists()
    env.stop()
    assert idx[0].read_bytes() != bytes(raw)  # rewritten


def test_empty_ledger_files_are_removed(tmp_path: Path) -> None:
    env = Env(tmp_path)
    ml = env.start().open(NAME)
    directory = ml._directory
    first = ml.current_ledger_id
    env.stop()
    assert (directory / f"{first}.log").exists()
    ml = env.start().open(NAME)
    assert not (directory / f"{first}.log").exists()
    assert ml.read_entries_now(EARLIEST, 10) == []
    env.stop()
