"""Bounded write descriptors: a factory keeps at most ``max_open_write_files`` ledger files
open for writing; the least recently written idle ones are closed and opened again at their
next append. Against a model, over many managed ledgers, appends, commits, rollovers, clean
restarts and crashes: nothing committed is lost or changed, and the open files stay bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from sq_storage_helpers import MakeFactory, close_like_a_crash, commit

from starquake.storage import (
    EARLIEST,
    LedgerFencedError,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    SqliteMetadataStore,
    StorageError,
)

LEDGERS = 6
LIMIT = 2


def _open_ledger_files(root: Path) -> int:
    """Descriptors of this process open for writing on files under ``root`` (reads of
    sealed ledgers have their own bounded, read-only descriptors)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith(str(root)):
                continue  # the state of only these is read: a test process may hold many
            info = Path(f"/proc/self/fdinfo/{fd}").read_text()
        except OSError:
            continue
        if int(info.split("flags:")[1].split()[0], 8) & 3:  # O_WRONLY or O_RDWR
            count += 1
    return count


def test_idle_files_are_closed_and_reopened_at_the_next_append(
    make_factory: MakeFactory, tmp_path: Path
) -> None:
    f = make_factory(max_open_write_files=LIMIT)
    mls = [f.open(f"t{i}") for i in range(LEDGERS)]
    for round_ in range(3):
        for i, ml in enumerate(mls):
            ml.append(f"{i}-{round_}".encode())
            commit(f)
            assert _open_ledger_files(tmp_path / "data") <= LIMIT
    for i, ml in enumerate(mls):
        assert [e.data for e in ml.read_entries_now(EARLIEST, 10)] == [
            f"{i}-{r}".encode() for r in range(3)
        ]
    f.close()
    f = make_factory(max_open_write_files=LIMIT)
    for i in range(LEDGERS):
        ml = f.open(f"t{i}")
        assert [e.data for e in ml.read_entries_now(EARLIEST, 10)] == [
            f"{i}-{r}".encode() for r in range(3)
        ]


def _commit_all(f: ManagedLedgerFactory, root: Path, *, each: bool = True) -> int:
    """Commit until nothing waits; at most one file over the limit is open meanwhile (the
    first ledger of a commit is always taken: checked at each commit with ``each``, else
    only at the end, as reading every descriptor's state takes time). Returns the number of
    commits."""
    rounds = 0
    while True:
        pending = f.take_pending()
        if pending is None:
            break
        if each:
            assert _open_ledger_files(root / "data") <= LIMIT + 1
        pending.execute()
        pending.finish()
        rounds += 1
        assert rounds <= 2 * LEDGERS
    assert _open_ledger_files(root / "data") <= LIMIT
    return rounds


def test_a_burst_over_more_ledgers_than_the_limit_is_committed_in_turns(
    make_factory: MakeFactory, tmp_path: Path
) -> None:
    """Every ledger appended to before one commit: the files stay bounded, the appends are
    committed over several commits, all of them."""
    f = make_factory(max_open_write_files=LIMIT)
    mls = [f.open(f"t{i}") for i in range(LEDGERS)]
    commit(f)  # the new files' headers
    for i, ml in enumerate(mls):
        ml.append(f"burst-{i}".encode())
    assert _open_ledger_files(tmp_path / "data") <= LIMIT
    assert _commit_all(f, tmp_path) > 1
    for i, ml in enumerate(mls):
        assert [e.data for e in ml.read_entries_now(EARLIEST, 10)] == [f"burst-{i}".encode()]


def test_a_burst_of_rollovers_opens_no_file_before_its_commit(
    make_factory: MakeFactory, tmp_path: Path
) -> None:
    """Each append of a burst rolls its managed ledger over: the new ledgers' files are
    created at once but opened only by the commits that write them, in turns within the
    limit (each used to be opened at its rollover, past the limit until the commit)."""
    f = make_factory(max_open_write_files=LIMIT, max_entries_per_ledger=1, min_rollover_seconds=0)
    mls = [f.open(f"t{i}") for i in range(LEDGERS)]
    for i, ml in enumerate(mls):
        ml.append(f"first-{i}".encode())
    _commit_all(f, tmp_path)
    for i, ml in enumerate(mls):
        ml.append(f"second-{i}".encode())  # a new ledger each
    assert _open_ledger_files(tmp_path / "data") <= LIMIT
    assert _commit_all(f, tmp_path) > 1
    for i, ml in enumerate(mls):
        got = [e.data for e in ml.read_entries_now(EARLIEST, 10)]
        assert got == [f"first-{i}".encode(), f"second-{i}".encode()]
        assert len({e.position.ledger_id for e in ml.read_entries_now(EARLIEST, 10)}) == 2


class WriteFdPoolModel(RuleBasedStateMachine):
    """Many managed ledgers through a factory that may keep only ``LIMIT`` files open."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.root = Path(tempfile.mkdtemp(prefix="fdpool-"))
        self.store: SqliteMetadataStore | None = None
        self.factory: ManagedLedgerFactory | None = None
        self.committed: dict[int, list[bytes]] = {i: [] for i in range(LEDGERS)}
        self.pending: dict[int, list[bytes]] = {i: [] for i in range(LEDGERS)}
        self.counter = 0

    def _start(self) -> None:
        self.store = SqliteMetadataStore(self.root / "meta.db")
        config = ManagedLedgerConfig(
            max_entries_per_ledger=3, min_rollover_seconds=0, max_open_write_files=LIMIT
        )
        self.factory = ManagedLedgerFactory(self.root / "data", self.store, config)
        self.mls = [self.factory.open(f"t{i}") for i in range(LEDGERS)]

    @initialize()
    def start(self) -> None:
        self._start()

    def teardown(self) -> None:
        import shutil

        if self.factory is not None:
            self.factory.close()
        if self.store is not None:
            self.store.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(i=st.integers(0, LEDGERS - 1), count=st.integers(1, 3))
    def append(self, i: int, count: int) -> None:
        for _ in range(count):
            self.counter += 1
            data = f"{i}:{self.counter}".encode()
            self.mls[i].append(data)
            self.pending[i].append(data)

    @rule()
    def commit(self) -> None:
        assert self.factory is not None
        _commit_all(self.factory, self.root, each=False)
        for i in range(LEDGERS):
            self.committed[i] += self.pending[i]
            self.pending[i] = []
        assert _open_ledger_files(self.root / "data") <= LIMIT

    @rule()
    def clean_restart(self) -> None:
        assert self.factory is not None and self.store is not None
        self.factory.close()
        self.store.close()
        for i in range(LEDGERS):
            self.committed[i] += self.pending[i]
            self.pending[i] = []
        self._start()

    @rule()
    def crash(self) -> None:
        assert self.factory is not None and self.store is not None
        close_like_a_crash(self.factory, self.mls)
        self.store.close()
        self.factory = None
        self.pending = {i: [] for i in range(LEDGERS)}
        self._start()

    @invariant()
    def committed_entries_read_back(self) -> None:
        if self.factory is None:
            return
        for i, ml in enumerate(self.mls):
            got = [e.data for e in ml.read_entries_now(EARLIEST, 10_000)]
            assert got == self.committed[i]


WriteFdPoolModel.TestCase.settings = settings(
    max_examples=30, stateful_step_count=30, deadline=None
)
test_write_fd_pool_model = WriteFdPoolModel.TestCase


def test_a_file_that_cannot_be_opened_again_fails_its_commit_not_the_appends_before(
    make_factory: MakeFactory, tmp_path: Path
) -> None:
    """A closed idle ledger file gone when its next appends are committed: that commit fails
    naming the file, its ledgers are fenced (their appends never become visible); the other
    ledgers go on."""
    f = make_factory(max_open_write_files=1)
    first, second = f.open("first"), f.open("second")
    first.append(b"kept")
    commit(f)
    second.append(b"kept too")
    commit(f)  # first's file is closed now: idle, over the limit
    commit(f)
    (victim,) = [s for s in first._states.values() if s.fd < 0]
    victim.path.unlink()
    first.append(b"lost")
    pending = f.take_pending()
    assert pending is not None
    with pytest.raises(StorageError, match=str(victim.path)):
        pending.execute()
    assert pending.fail(StorageError("gone")) == [first]
    with pytest.raises(LedgerFencedError):
        first.append(b"refused")
    second.append(b"after")
    commit(f)
    assert [e.data for e in second.read_entries_now(EARLIEST, 10)] == [b"kept too", b"after"]
