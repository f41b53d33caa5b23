"""The group committer over random appends, commit budgets and one failed fsync anywhere.

Appends to three ledgers arrive in rounds while commits run (a pipeline of 1 to 5 commits: later
ones written while earlier ones are fsynced; a commit sealing a ledger alone); the failed fsync
loses what its file had not synced yet. Without fsync (``journal_sync`` off) a small commit is
written by the loop itself. Whatever happens:
each ledger's reported positions only grow; a reopened ledger holds exactly the entries up to
its last reported position when it was fenced, else every entry appended; a reported entry
is never lost; without an injected failure nothing fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from hypothesis import event, given, settings
from hypothesis import strategies as st
from sq_storage_helpers import run_and_close

from starquake.broker.committer import GroupCommitter
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

LEDGERS = 3


class FailOneSync(StorageFaults):
    """Fails the ``fail_at``-th fsync (counting from 1; None: none) with EIO, and loses what
    the file had not synced, as a failed flush does: the file is cut back to its size at its
    last fsync (each fsync here is taken to sync what the file held just before it)."""

    def __init__(self, fail_at: int | None) -> None:
        self.fail_at = fail_at
        self.syncs = 0
        self._synced: dict[Path, int] = {}
        self._lock = threading.Lock()

    def before_sync(self, path: Path) -> None:
        with self._lock:
            self.syncs += 1
            if self.syncs == self.fail_at:
                os.truncate(path, self._synced.get(path, 0))
                raise OSError(errno.EIO, "fsync failed (injected)")
            self._synced[path] = path.stat().st_size


rounds = st.lists(
    st.lists(st.tuples(st.integers(0, LEDGERS - 1), st.integers(1, 6), st.integers(1, 900))),
    min_size=1,
    max_size=8,
)


@settings(max_examples=int(os.environ.get("STARQUAKE_COMMIT_EXAMPLES", "60")), deadline=None)
@given(
    rounds=rounds,
    budget=st.sampled_from([0, 300, 1500, 6000]),
    fail_at=st.one_of(st.none(), st.integers(1, 12)),
    per_ledger=st.integers(2, 30),
    depth=st.integers(1, 5),
    sync=st.sampled_from([True, True, True, False]),
)
def test_reports_grow_and_what_was_reported_survives(
    rounds: list[list[tuple[int, int, int]]],
    budget: int,
    fail_at: int | None,
    per_ledger: int,
    depth: int,
    sync: bool,
) -> None:
    root = Path(tempfile.mkdtemp(prefix="sq-commit-states-"))
    try:
        _check(root, rounds, budget, fail_at, per_ledger, depth, sync)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _check(
    root: Path,
    rounds: list[list[tuple[int, int, int]]],
    budget: int,
    fail_at: int | None,
    per_ledger: int,
    depth: int,
    sync: bool,
) -> None:
    faults = FailOneSync(fail_at)
    store = SqliteMetadataStore(root / "meta.db")
    config = ManagedLedgerConfig(
        max_entries_per_ledger=per_ledger,
        min_rollover_seconds=0,
        commit_max_bytes=budget,
        journal_sync=sync,
    )
    factory = ManagedLedgerFactory(root / "data", store, config, faults=faults)
    names = [f"persistent://public/default/states-{k}" for k in range(LEDGERS)]
    appended: dict[str, list[tuple[Position, bytes]]] = {name: [] for name in names}
    reported: dict[str, list[Position]] = {name: [] for name in names}
    failures: list[BaseException] = []

    def committed(results: Sequence[tuple[ManagedLedger, Position]]) -> None:
        for ml, position in results:
            reported[ml.name].append(position)

    def failed(_ledgers: Sequence[ManagedLedger], exc: BaseException) -> None:
        failures.append(exc)

    async def run() -> dict[str, list[tuple[Position, bytes]]]:
        committer = GroupCommitter(factory, committed, failed, depth)
        try:
            mls = [factory.open(name) for name in names]
            counter = 0
            for appends in rounds:
                for k, count, size in appends:
                    for _ in range(count):
                        counter += 1
                        data = counter.to_bytes(4, "big") * (1 + size // 4)
                        # refused once fenced by the failure: never acknowledged
                        with contextlib.suppress(LedgerFencedError):
                            appended[names[k]].append((mls[k].append(data), data))
                committer.kick()
                await asyncio.sleep(0)
            await committer.drain()
            for ml in mls:
                ml.close()
            await committer.drain()
            return {
                name: [
                    (e.position, bytes(e.data))
                    for e in factory.open(name).read_entries_now(EARLIEST, 100_000)
                ]
                for name in names
            }
        finally:
            committer.close()

    stored = run_and_close(run, factory, store)

    event(f"failed commits: {min(len(failures), 2)}")
    if fail_at is None or faults.syncs < fail_at:
        assert failures == []
    for name in names:
        positions = reported[name]
        assert positions == sorted(set(positions)), f"{name}: reports out of order"
        last = positions[-1] if positions else None
        acknowledged = [(p, d) for p, d in appended[name] if last is not None and p <= last]
        assert stored[name][: len(acknowledged)] == acknowledged, f"{name}: a reported entry lost"
        if not failures:
            assert stored[name] == appended[name] == acknowledged, f"{name}: not all committed"
        else:  # committed to the end, or fenced: cut to what was reported
            assert stored[name] in (appended[name], acknowledged), f"{name}: {len(stored[name])}"
            if stored[name] != appended[name]:
                event("a fenced ledger cut to its reported entries")
