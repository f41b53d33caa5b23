"""The current ledger's file is zero-filled ahead of its writes (so that each fsync flushes data,
not the file system's journal): the zeros never become entries, sealing cuts them off, and the
recovery after a crash cuts them without quarantining or reporting them."""

from __future__ import annotations

import itertools
import logging
import shutil
from pathlib import Path

import pytest
from sq_storage_helpers import commit, open_factory

from starquake.broker.config import BrokerConfig
from starquake.storage import (
    EARLIEST,
    Entry,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    SqliteMetadataStore,
)
from starquake.storage.commit import PREALLOCATE_LARGE_WRITE, PREALLOCATE_MIN_BYTES
from starquake.storage.segment import HEADER_SIZE, LEDGER_RECORD_HEADER_SIZE, read_index

NAME = "persistent://public/default/prealloc"


def _close(factory: ManagedLedgerFactory, store: SqliteMetadataStore) -> None:
    factory.close()
    store.close()


def _data_end(count: int, size: int) -> int:
    return HEADER_SIZE + count * (LEDGER_RECORD_HEADER_SIZE + size)


def test_the_current_file_is_zero_filled_ahead_and_sealing_cuts_the_zeros(tmp_path: Path) -> None:
    factory, store = open_factory(tmp_path, max_entries_per_ledger=20, min_rollover_seconds=0)
    ml = factory.open(NAME)
    datas = [bytes([i]) * 100 for i in range(30)]
    positions = [ml.append(d) for d in datas[:10]]
    commit(factory)
    first = ml.current_ledger_id
    path = ml._directory / f"{first}.log"
    # ahead of the 10 records: a step of at least 64 KB, zeros only
    assert path.stat().st_size == _data_end(10, 100) + PREALLOCATE_MIN_BYTES
    assert path.read_bytes()[_data_end(10, 100) :] == bytes(PREALLOCATE_MIN_BYTES)
    positions += [ml.append(d) for d in datas[10:]]  # the 21st rolls the ledger over
    commit(factory)
    commit(factory)  # the sealed ledger's index job
    assert path.stat().st_size == _data_end(20, 100)
    assert read_index(path.with_suffix(".idx"), first, _data_end(20, 100)) is not None
    _close(factory, store)
    factory, store = open_factory(tmp_path)
    ml = factory.open(NAME)
    assert ml.read_entries_now(EARLIEST, 100) == [
        Entry(p, d) for p, d in zip(positions, datas, strict=True)
    ]
    # the clean close sealed the second ledger too: cut to its records, with an index
    second = positions[-1].ledger_id
    second_path = ml._directory / f"{second}.log"
    assert second_path.stat().st_size == _data_end(10, 100)
    assert read_index(second_path.with_suffix(".idx"), second, _data_end(10, 100)) is not None
    _close(factory, store)


def test_steps_grow_with_the_file_up_to_the_maximum(tmp_path: Path) -> None:
    factory, store = open_factory(tmp_path, preallocate_max_bytes=256 * 1024)
    ml = factory.open(NAME)
    path = ml._directory / f"{ml.current_ledger_id}.log"
    sizes = []
    for _ in range(12):
        ml.append(b"x" * (60 * 1024 - LEDGER_RECORD_HEADER_SIZE))
        commit(factory)
        sizes.append(path.stat().st_size)
    ends = [HEADER_SIZE + n * 60 * 1024 for n in range(1, 13)]
    assert all(size > end for size, end in zip(sizes, ends, strict=True))
    # each step as large as the file then was, never more than the maximum
    steps = [b - a for a, b in itertools.pairwise(sizes) if b != a]
    assert steps and max(steps) <= 256 * 1024 + 60 * 1024
    assert sizes[-1] - ends[-1] <= 256 * 1024
    _close(factory, store)


def test_by_default_a_step_is_at_most_one_megabyte(tmp_path: Path) -> None:
    """The commit that writes a step flushes its zeros with its own data: the default keeps
    that pause near a millisecond (a 4 MB step took 7-8 ms on ext4), for the broker too."""
    assert ManagedLedgerConfig().preallocate_max_bytes == 1024 * 1024
    assert BrokerConfig().starquakeLedgerPreallocationMB == 1
    factory, store = open_factory(tmp_path)
    ml = factory.open(NAME)
    path = ml._directory / f"{ml.current_ledger_id}.log"
    size = 100 * 1024 - LEDGER_RECORD_HEADER_SIZE
    ahead = []
    for n in range(1, 61):  # 6 MB of 100 KB commits
        ml.append(b"y" * size)
        commit(factory)
        ahead.append(path.stat().st_size - (HEADER_SIZE + n * 100 * 1024))
    assert min(ahead) >= 0 and max(ahead) <= 1024 * 1024
    assert max(ahead) > 512 * 1024  # the steps did reach the maximum
    _close(factory, store)


@pytest.mark.parametrize("config", [{"preallocate_max_bytes": 0}, {"journal_sync": False}])
def test_without_preallocation_the_file_ends_at_its_last_record(
    tmp_path: Path, config: dict[str, int]
) -> None:
    factory, store = open_factory(tmp_path, **config)
    ml = factory.open(NAME)
    for _ in range(5):
        ml.append(b"y" * 50)
    commit(factory)
    assert (ml._directory / f"{ml.current_ledger_id}.log").stat().st_size == _data_end(5, 50)
    _close(factory, store)


def test_a_large_write_grows_the_file_without_zeros_and_small_ones_fill_again(
    tmp_path: Path,
) -> None:
    factory, store = open_factory(tmp_path)
    ml = factory.open(NAME)
    path = ml._directory / f"{ml.current_ledger_id}.log"
    big = PREALLOCATE_LARGE_WRITE
    ml.append(b"L" * big)
    commit(factory)
    assert path.stat().st_size == _data_end(1, big)  # no zeros: the bytes bound its fsync
    ml.append(b"s" * 100)
    commit(factory)
    end = _data_end(1, big) + LEDGER_RECORD_HEADER_SIZE + 100
    assert path.stat().st_size > end
    assert path.read_bytes()[end:] == bytes(path.stat().st_size - end)
    assert [len(e.data) for e in ml.read_entries_now(EARLIEST, 10)] == [big, 100]
    _close(factory, store)


def _crash_copy(tmp_path: Path) -> Path:
    """The files as a kill -9 leaves them (everything committed was fsynced): a copy taken
    while the factory is still open."""
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "live", crashed)
    return crashed


def test_a_crash_leaves_zeros_that_recovery_cuts_without_a_word(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    factory, store = open_factory(tmp_path / "live")
    ml = factory.open(NAME)
    positions = [ml.append(bytes([i]) * 40) for i in range(7)]
    commit(factory)
    ledger = ml.current_ledger_id
    crashed = _crash_copy(tmp_path)
    _close(factory, store)
    path = next(crashed.rglob(f"{ledger}.log"))
    assert path.stat().st_size > _data_end(7, 40)
    caplog.set_level(logging.DEBUG, logger="starquake.storage")
    factory, store = open_factory(crashed)
    ml = factory.open(NAME)
    assert [e.position for e in ml.read_entries_now(EARLIEST, 100)] == positions
    assert path.stat().st_size == _data_end(7, 40)
    assert not (path.parent / "quarantine").exists()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("zero-filled tail" in r.getMessage() for r in caplog.records)
    _close(factory, store)


def test_a_torn_record_before_the_zeros_is_quarantined_without_them(tmp_path: Path) -> None:
    factory, store = open_factory(tmp_path / "live", preallocate_max_bytes=4 * 1024 * 1024)
    ml = factory.open(NAME)
    for _ in range(40):
        ml.append(b"z" * 100_000)
        commit(factory)
    ledger = ml.current_ledger_id
    crashed = _crash_copy(tmp_path)
    _close(factory, store)
    path = next(crashed.rglob(f"{ledger}.log"))
    end = _data_end(40, 100_000)
    assert path.stat().st_size > end + 1024 * 1024  # megabytes of zeros after the records
    torn = b"\x10\x27\x00\x00\xaa\xbb\xcc\xdd" + b"partial record"
    with path.open("r+b") as f:
        f.seek(end)
        f.write(torn)
    factory, store = open_factory(crashed)
    ml = factory.open(NAME)
    assert len(ml.read_entries_now(EARLIEST, 100)) == 40
    assert path.stat().st_size == end
    kept = list((path.parent / "quarantine").iterdir())
    assert [q.read_bytes() for q in kept] == [torn]
    _close(factory, store)


def test_a_file_of_a_header_and_zeros_is_removed_not_quarantined(tmp_path: Path) -> None:
    factory, store = open_factory(tmp_path / "live")
    ml = factory.open(NAME)
    ml.append(b"first")
    commit(factory)
    ledger = ml.current_ledger_id
    crashed = _crash_copy(tmp_path)
    _close(factory, store)
    path = next(crashed.rglob(f"{ledger}.log"))
    with path.open("r+b") as f:  # the record's bytes never reached the disk, the zeros did
        f.seek(HEADER_SIZE)
        f.write(bytes(LEDGER_RECORD_HEADER_SIZE + 5))
    factory, store = open_factory(crashed)
    ml = factory.open(NAME)
    assert ml.read_entries_now(EARLIEST, 10) == []
    assert not path.exists()
    assert not (path.parent / "quarantine").exists()
    _close(factory, store)


def test_damage_before_the_last_record_keeps_the_last_record_followed_by_zeros(
    tmp_path: Path,
) -> None:
    """The record after damaged bytes is trusted when it is the file's last: followed by the
    preallocated zeros as by the end of the file (it was cut as a torn tail)."""
    factory, store = open_factory(tmp_path / "live")
    ml = factory.open(NAME)
    positions = [ml.append(bytes([65 + i]) * 30) for i in range(6)]
    commit(factory)
    ledger = ml.current_ledger_id
    crashed = _crash_copy(tmp_path)
    _close(factory, store)
    path = next(crashed.rglob(f"{ledger}.log"))
    record = LEDGER_RECORD_HEADER_SIZE + 30
    raw = bytearray(path.read_bytes())
    for i in range(HEADER_SIZE + 2, HEADER_SIZE + 5 * record - 2):  # records 0 to 4
        raw[i] ^= 0x5A
    path.write_bytes(bytes(raw))
    factory, store = open_factory(crashed)
    ml = factory.open(NAME)
    assert ml.read_entries_now(EARLIEST, 10) == [Entry(positions[5], b"F" * 30)]
    assert ml.last_confirmed == positions[5]
    _close(factory, store)
