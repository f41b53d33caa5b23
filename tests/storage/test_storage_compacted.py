"""The compacted ledger file: what is written reads back; unfinished or damaged files are
detected, never read as valid."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starquake.storage import Position
from starquake.storage.compacted import (
    CompactedLedgerError,
    CompactedLedgerWriter,
    compacted_file_name,
    list_compacted_files,
    open_compacted_ledger,
)


@st.composite
def compacted_entries(draw: st.DrawFn) -> list[tuple[Position, bytes]]:
    """Entries at strictly increasing positions, with arbitrary (possibly empty) bytes."""
    positions = draw(
        st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10_000)), unique=True, max_size=40)
    )
    return [
        (Position(ledger, entry), draw(st.binary(max_size=300)))
        for ledger, entry in sorted(positions)
    ]


def _write(
    directory: Path, ledger_id: int, entries: list[tuple[Position, bytes]], horizon: Position
) -> Path:
    path = directory / compacted_file_name(ledger_id)
    writer = CompactedLedgerWriter(path, ledger_id)
    half = len(entries) // 2
    writer.append(entries[:half])  # appended in two calls, as the compactor does per chunk
    writer.append(entries[half:])
    writer.finish(horizon)
    return path


@given(entries=compacted_entries(), ledger_id=st.integers(0, 2**40))
def test_written_entries_read_back(entries: list[tuple[Position, bytes]], ledger_id: int) -> None:
    horizon = Position(7, 3)
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp), ledger_id, entries, horizon)
        ledger = open_compacted_ledger(path, ledger_id)
        try:
            assert ledger.horizon == horizon
            assert len(ledger) == len(entries)
            assert ledger.size == sum(len(data) for _, data in entries)
            got = ledger.read(0, len(entries) + 5)
            assert [(r.position, bytes(r.data or b"")) for r in got] == entries
            assert all(r.data is not None for r in got)
            assert ledger.verify() == []
            # find: the first entry at or after any position
            for probe in [Position(-1, -1), *(p for p, _ in entries), Position(6, 0)]:
                index = ledger.find(probe)
                expected = next((i for i, (p, _) in enumerate(entries) if p >= probe), None)
                assert index == (len(entries) if expected is None else expected)
            # reads starting anywhere, any count
            for first in range(len(entries)):
                part = ledger.read(first, 3)
                assert [r.position for r in part] == [p for p, _ in entries[first : first + 3]]
        finally:
            ledger.close()


@given(entries=compacted_entries(), cut=st.integers(1, 10_000))
def test_a_torn_file_is_refused(entries: list[tuple[Position, bytes]], cut: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp), 3, entries, Position(9, 9))
        size = path.stat().st_size
        os.truncate(path, max(size - cut, 0))
        with pytest.raises(CompactedLedgerError):
            open_compacted_ledger(path, 3)


@given(
    entries=compacted_entries(), where=st.floats(0, 1, exclude_max=True), flip=st.integers(1, 255)
)
def test_a_damaged_byte_is_detected(
    entries: list[tuple[Position, bytes]], where: float, flip: int
) -> None:
    """A changed byte anywhere makes the file refused (header, index, trailer) or its record
    reported damaged by a read: it never reads back as different valid data."""
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp), 3, entries, Position(9, 9))
        raw = bytearray(path.read_bytes())
        offset = int(where * len(raw))
        raw[offset] ^= flip
        path.write_bytes(bytes(raw))
        try:
            ledger = open_compacted_ledger(path, 3)
        except CompactedLedgerError:
            return
        try:
            records = ledger.read(0, len(ledger))
            intact = [(r.position, bytes(r.data)) for r in records if r.data is not None]
            assert len(intact) == len(entries) - 1  # exactly the damaged record is reported
            assert set(intact) < set(entries)
            assert len(ledger.verify()) == 1
        finally:
            ledger.close()


def test_an_unfinished_file_is_refused_and_abort_removes_it(tmp_path: Path) -> None:
    path = tmp_path / compacted_file_name(5)
    writer = CompactedLedgerWriter(path, 5)
    writer.append([(Position(1, 1), b"x" * 100)])
    with pytest.raises(CompactedLedgerError, match="not finished"):
        open_compacted_ledger(path, 5)
    writer.abort()
    assert not path.exists()


def test_the_file_must_be_the_expected_ledger(tmp_path: Path) -> None:
    path = _write(tmp_path, 5, [(Position(1, 1), b"x")], Position(1, 1))
    with pytest.raises(CompactedLedgerError, match="header"):
        open_compacted_ledger(path, 6)
    with pytest.raises(CompactedLedgerError):
        open_compacted_ledger(tmp_path / "missing.compacted", 6)


def test_out_of_order_appends_are_refused(tmp_path: Path) -> None:
    writer = CompactedLedgerWriter(tmp_path / compacted_file_name(1), 1)
    writer.append([(Position(2, 5), b"a")])
    with pytest.raises(CompactedLedgerError, match="in order"):
        writer.append([(Position(2, 5), b"b")])
    writer.abort()


def test_listing_finds_only_compacted_files(tmp_path: Path) -> None:
    for name in ("3.compacted", "12.compacted", "4.log", "4.idx", "x.compacted", "name"):
        (tmp_path / name).write_bytes(b"")
    assert list_compacted_files(tmp_path) == [
        (3, tmp_path / "3.compacted"),
        (12, tmp_path / "12.compacted"),
    ]
    assert list_compacted_files(tmp_path / "absent") == []
