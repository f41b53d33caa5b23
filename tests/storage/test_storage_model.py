"""Model-based test of the storage engine across clean restarts and crashes.

A hypothesis state machine drives a managed ledger with tiny ledgers (rollover every few
entries), durable cursors with individual, cumulative and batch-index acknowledgments, cursor
deletion, trimming, cursor persistence, clean restarts and crashes (everything in memory is lost:
uncommitted appends and unpersisted cursor states). A plain model says what must hold after every
step; after a crash the cursors must be exactly what was last persisted.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from sq_storage_helpers import close_like_a_crash

from starquake.storage import (
    EARLIEST,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
    SqliteMetadataStore,
)
from starquake.storage.read_now import read_now

NAME = "persistent://public/default/model"
CURSORS = ("a", "b", "c")
BATCH = 3  # every entry is treated as a batch of this many messages


@dataclass
class CursorModel:
    """Acknowledged batch indexes per position (a full set: the whole entry is acked)."""

    acked: dict[Position, frozenset[int]] = field(default_factory=dict)

    def copy(self) -> CursorModel:
        return CursorModel(dict(self.acked))

    def is_acked(self, p: Position) -> bool:
        return len(self.acked.get(p, ())) == BATCH


class StorageMachine(RuleBasedStateMachine):
    commit_budget = 0  # a commit takes every pending append

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="sq-model-"))
        self.now = 1_000_000.0
        self.store: SqliteMetadataStore | None = None
        self.factory: ManagedLedgerFactory | None = None
        self.ml: ManagedLedger
        self.committed: list[tuple[Position, bytes]] = []
        self.pending: list[tuple[Position, bytes]] = []
        self.cursors: dict[str, CursorModel] = {}
        self.persisted: dict[str, CursorModel] = {}
        self.counter = 0

    # --- lifecycle ----------------------------------------------------------------------------

    def _start(self) -> None:
        self.store = SqliteMetadataStore(self.root / "meta.db")
        config = ManagedLedgerConfig(
            max_entries_per_ledger=3, min_rollover_seconds=0, commit_max_bytes=self.commit_budget
        )
        self.factory = ManagedLedgerFactory(
            self.root / "data", self.store, config, clock=lambda: self.now
        )
        self.ml = self.factory.open(NAME)

    @initialize()
    def start(self) -> None:
        self._start()

    def teardown(self) -> None:
        if self.factory is not None:
            self.factory.close()
        if self.store is not None:
            self.store.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule()
    def clean_restart(self) -> None:
        assert self.factory is not None and self.store is not None
        self.factory.close()  # commits what is pending and persists every cursor
        self.store.close()
        self.committed += self.pending
        self.pending = []
        self.persisted = {n: c.copy() for n, c in self.cursors.items()}
        self._start()

    @rule()
    def crash(self) -> None:
        assert self.store is not None and self.factory is not None
        close_like_a_crash(self.factory, [self.ml])
        self.store.close()  # nothing else is flushed: appends not committed are lost
        self.factory = None
        self.pending = []
        self.cursors = {n: c.copy() for n, c in self.persisted.items()}
        self._start()

    # --- writing ------------------------------------------------------------------------------

    @rule(count=st.integers(1, 4))
    def append(self, count: int) -> None:
        for _ in range(count):
            self.counter += 1
            data = f"entry-{self.counter}".encode()
            self.pending.append((self.ml.append(data), data))

    @rule()
    def commit(self) -> None:
        assert self.factory is not None
        pending = self.factory.take_pending()
        if pending is not None:
            pending.execute()
            pending.finish()
        # what the commit took (all, or a first part within the budget) is readable now
        last = self.ml.last_confirmed
        done = [(p, data) for p, data in self.pending if p <= last]
        if not self.commit_budget:
            assert len(done) == len(self.pending)
        self.committed += done
        self.pending = self.pending[len(done) :]

    @rule()
    def tick(self) -> None:
        self.now += 10
        self.ml.maybe_rollover()

    # --- cursors ------------------------------------------------------------------------------

    @rule(name=st.sampled_from(CURSORS), earliest=st.booleans())
    def open_cursor(self, name: str, earliest: bool) -> None:
        if name in self.cursors:
            return
        cursor = self.ml.open_cursor(name, "earliest" if earliest else "latest")
        model = CursorModel()
        for p, _ in self.committed:
            if p <= cursor.mark_delete_position:
                model.acked[p] = frozenset(range(BATCH))
        self.cursors[name] = model

    @rule(name=st.sampled_from(CURSORS))
    def delete_cursor(self, name: str) -> None:
        if name in self.cursors:
            self.ml.delete_cursor(name)
            del self.cursors[name]

    def _stored(self) -> list[Position]:
        return [p for p, _ in self.committed if self.ml.entry_exists(p)]

    @precondition(lambda self: self.cursors and self.committed)
    @rule(data=st.data())
    def ack_individual(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.cursors)))
        stored = self._stored()
        if not stored:
            return
        p = data.draw(st.sampled_from(stored))
        assert self.ml.cursors[name].delete([p]) == []
        self.cursors[name].acked[p] = frozenset(range(BATCH))

    @precondition(lambda self: self.cursors and self.committed)
    @rule(data=st.data())
    def ack_cumulative(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.cursors)))
        stored = self._stored()
        if not stored:
            return
        p = data.draw(st.sampled_from(stored))
        self.ml.cursors[name].mark_delete(p)
        for q, _ in self.committed:
            if q <= p:
                self.cursors[name].acked[q] = frozenset(range(BATCH))

    @precondition(lambda self: self.cursors and self.committed)
    @rule(data=st.data())
    def ack_batch_index(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.cursors)))
        stored = self._stored()
        if not stored:
            return
        p = data.draw(st.sampled_from(stored))
        index = data.draw(st.integers(0, BATCH - 1))
        model = self.cursors[name]
        if model.is_acked(p):
            return
        now = model.acked.get(p, frozenset()) | {index}
        remaining = sum(1 << i for i in range(BATCH) if i not in now)
        self.ml.cursors[name].ack_batch_indexes(p, [remaining], BATCH)
        model.acked[p] = frozenset(now)

    @rule(position=st.tuples(st.integers(0, 3000), st.integers(0, 20)))
    def ack_unwritten(self, position: tuple[int, int]) -> None:
        """Acknowledging a position that holds no entry changes nothing."""
        p = Position(*position)
        if self.ml.entry_exists(p) or self.ml.is_trimmed(p) or not self.cursors:
            return
        name = sorted(self.cursors)[0]
        cursor = self.ml.cursors[name]
        if p <= cursor.mark_delete_position:
            return
        assert cursor.delete([p]) == [p]

    @rule()
    def persist(self) -> None:
        assert self.factory is not None and self.store is not None
        snapshots = self.factory.take_cursor_snapshots()
        self.store.put_many(snapshots)
        self.factory.cursor_snapshots_written(snapshots)
        self.persisted = {n: c.copy() for n, c in self.cursors.items()}

    @rule()
    def trim(self) -> None:
        self.ml.trim()

    # --- what must hold -----------------------------------------------------------------------

    @invariant()
    def stored_entries_are_a_suffix_that_no_cursor_still_needs(self) -> None:
        entries = self.ml.read_entries_now(EARLIEST, 10_000)
        got = [(e.position, e.data) for e in entries]
        assert got == self.committed[len(self.committed) - len(got) :]
        gone = self.committed[: len(self.committed) - len(got)]
        for p, _ in gone:  # only what every live cursor acknowledged may have been trimmed
            for name, model in self.cursors.items():
                assert model.is_acked(p), f"{p} trimmed but not acknowledged by {name}"

    @invariant()
    def cursors_match_the_model(self) -> None:
        assert sorted(self.ml.cursors) == sorted(self.cursors)
        for name, model in self.cursors.items():
            cursor = self.ml.cursors[name]
            stored = self._stored()
            for p in stored:
                assert cursor.is_acked(p) == model.is_acked(p), (name, p)
                acked = model.acked.get(p, frozenset())
                if acked and not model.is_acked(p):
                    words = cursor.get_batch_ack_set(p)
                    assert words is not None
                    assert {i for i in range(BATCH) if not words[0] >> i & 1} == acked
            unacked = [p for p in stored if not model.is_acked(p)]
            assert cursor.backlog() == len(unacked)
            cursor.rewind()
            assert [e.position for e in read_now(cursor.read_entries(10_000))] == unacked


class BudgetedStorageMachine(StorageMachine):
    """Commits of at most 40 bytes (one or two records): appends span commits, sealed
    ledgers are still written whole."""

    commit_budget = 40


TestStorageModel = StorageMachine.TestCase
TestBudgetedStorageModel = BudgetedStorageMachine.TestCase
# STARQUAKE_MODEL_EXAMPLES=5000 for a long run on demand
TestStorageModel.settings = settings(
    max_examples=int(os.environ.get("STARQUAKE_MODEL_EXAMPLES", "150")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestBudgetedStorageModel.settings = TestStorageModel.settings
