"""Reading a compacted view in steps, passing over acknowledged entries: every entry not
skipped comes out once, in order, whatever the step sizes."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from starquake.broker.compaction.view import CompactedEntry, CompactedView
from starquake.storage import Entry, Position
from starquake.storage.compacted import (
    CompactedLedgerWriter,
    compacted_file_name,
    open_compacted_ledger,
)
from starquake.storage.compacted_files import FileCompactedReader


@given(
    count=st.integers(0, 300),
    skipped=st.sets(st.integers(0, 299)),
    max_entries=st.integers(1, 40),
    max_scan=st.integers(1, 120),
    start=st.integers(0, 320),
)
def test_stepwise_reads_return_every_entry_not_skipped(
    count: int, skipped: set[int], max_entries: int, max_scan: int, start: int
) -> None:
    positions = [Position(3 + i // 100, (i % 100) * 2) for i in range(count)]
    skip_positions = {positions[i] for i in skipped if i < count}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / compacted_file_name(9)
        writer = CompactedLedgerWriter(path, 9)
        writer.append((p, f"{p}".encode()) for p in positions)
        writer.finish(Position(10, 0))
        view = CompactedView(FileCompactedReader(open_compacted_ledger(path, 9)))
        try:
            origin = positions[start] if start < count else Position(99, 0)
            wanted = [p for p in positions if p >= origin and p not in skip_positions]
            got: list[Entry] = []
            position: Position | None = origin
            steps = 0
            while position is not None:
                entries, position = asyncio.run(
                    view.read_from(position, max_entries, skip_positions.__contains__, max_scan)
                )
                assert len(entries) <= max_entries
                got += entries
                steps += 1
                assert steps <= count + 2
            assert [e.position for e in got] == wanted
            assert all(isinstance(e, CompactedEntry) for e in got)
            assert [bytes(e.data) for e in got] == [f"{p}".encode() for p in wanted]
        finally:
            view.close()


def test_last_message_of_a_view(tmp_path: Path) -> None:
    path = tmp_path / compacted_file_name(4)
    writer = CompactedLedgerWriter(path, 4)
    writer.finish(Position(1, 1))
    view = CompactedView(FileCompactedReader(open_compacted_ledger(path, 4)))
    assert asyncio.run(view.last_message()) is None and view.entries == 0
    view.close()
