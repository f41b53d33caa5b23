"""kill -9 a process that appends and commits in a loop; every reported position must survive."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from starquake.storage import (
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
    SqliteMetadataStore,
)

NAME = "persistent://public/default/crash"

# What both children start with: argv is the directory, the run number and the ledgers' name
# prefix; ``config_args`` (a format field) completes the factory's ManagedLedgerConfig.
PRELUDE = """
import asyncio, collections, hashlib, sys, threading
from pathlib import Path
from starquake.storage import ManagedLedgerConfig, ManagedLedgerFactory, SqliteMetadataStore

root, run = Path(sys.argv[1]), int(sys.argv[2])

def payload(run, i):
    seed = hashlib.sha256(f"{{run}}:{{i}}".encode()).digest()
    return seed * (1 + seed[0] % 40)

store = SqliteMetadataStore(root / "meta.db")
config = ManagedLedgerConfig(min_rollover_seconds=0, {config_args})
factory = ManagedLedgerFactory(root / "data", store, config)
"""

CHILD = PRELUDE.format(config_args="max_entries_per_ledger=37") + textwrap.dedent(
    """
    mls = [factory.open(f"{sys.argv[3]}-{k}") for k in range(3)]
    i = 0
    appended = []
    while True:
        for _ in range(1 + i % 7):
            ml = mls[i % 3]
            appended.append((ml, ml.append(payload(run, i)), i))
            i += 1
        commit = factory.take_pending()
        thread = threading.Thread(target=commit.execute)
        thread.start()
        done, appended = appended, []
        for _ in range(i % 5):  # appends racing with the commit thread
            ml = mls[i % 3]
            appended.append((ml, ml.append(payload(run, i)), i))
            i += 1
        thread.join()
        commit.finish()
        out = "".join(f"{ml.name} {p.ledger_id} {p.entry_id} {run} {n}\\n" for ml, p, n in done)
        sys.stdout.write(out)
        sys.stdout.flush()
    """
)


# The broker's group committer, commits of at most 3,000 bytes, at most 300 entries waiting
# (a window, as producers have): with appends left over, each commit is written while the one
# before is fsynced; a position is printed once reported committed (a producer's receipt).
CHILD_PIPELINE = PRELUDE.format(
    config_args="max_entries_per_ledger=400, commit_max_bytes=3000"
) + textwrap.dedent(
    """
    from starquake.broker.committer import GroupCommitter

    waiting = collections.defaultdict(collections.deque)

    def committed(results):
        out = []
        for ml, last in results:
            queue = waiting[ml.name]
            while queue and queue[0][0] <= last:
                p, n = queue.popleft()
                out.append(f"{ml.name} {p.ledger_id} {p.entry_id} {run} {n}\\n")
        sys.stdout.write("".join(out))
        sys.stdout.flush()

    def failed(ledgers, exc):
        raise SystemExit(f"commit failed: {exc}")

    async def main():
        committer = GroupCommitter(factory, committed, failed)
        mls = [factory.open(f"{sys.argv[3]}-{k}") for k in range(3)]
        i = 0
        while True:
            while sum(len(queue) for queue in waiting.values()) > 300:  # a producer's window
                await asyncio.sleep(0.0002)
            for _ in range(1 + i % 23):
                ml = mls[i % 3]
                waiting[ml.name].append((ml.append(payload(run, i)), i))
                i += 1
            committer.kick()
            await asyncio.sleep(0)

    asyncio.run(main())
    """
)


def _payload(run: int, i: int) -> bytes:
    seed = hashlib.sha256(f"{run}:{i}".encode()).digest()
    return seed * (1 + seed[0] % 40)


@pytest.mark.slow
@pytest.mark.parametrize("child", [CHILD, CHILD_PIPELINE], ids=["commits", "group-committer"])
def test_kill9_keeps_every_committed_entry(tmp_path: Path, child: str) -> None:
    rng = random.Random(1234)
    script = tmp_path / "child.py"
    script.write_text(child)
    committed: list[tuple[str, Position, int, int]] = []
    for run in range(3):
        proc = subprocess.Popen(
            [sys.executable, str(script), str(tmp_path), str(run), NAME],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: list[str] = []
        assert proc.stdout is not None
        stdout = proc.stdout
        reader = threading.Thread(target=lines.extend, args=(stdout,))
        reader.start()
        deadline = time.monotonic() + 10
        while not lines and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.05, 0.6))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        reader.join()
        stdout.close()
        assert proc.stderr is not None
        err = proc.stderr.read()
        proc.stderr.close()
        assert lines, f"child printed nothing: {err}"
        for line in lines:
            if not line.endswith("\n"):
                continue  # torn stdout line: the parent never "received" this receipt
            name, lid, eid, r, n = line.split()
            committed.append((name, Position(int(lid), int(eid)), int(r), int(n)))

        store = SqliteMetadataStore(tmp_path / "meta.db")
        factory = ManagedLedgerFactory(
            tmp_path / "data", store, ManagedLedgerConfig(max_entries_per_ledger=37)
        )
        try:
            for name, position, r, n in committed:
                entry = factory.open(name).read_entry_now(position)
                assert entry is not None, f"{name} {position} lost after kill -9"
                assert entry.data == _payload(r, n)
            for k in range(3):
                ml = factory.open(f"{NAME}-{k}")
                entries = ml.read_entries_now((-1, -1), 1_000_000)
                positions = [e.position for e in entries]
                assert positions == sorted(positions)
        finally:
            factory.close()
            store.close()
    assert len(committed) > 10
