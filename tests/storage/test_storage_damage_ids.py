"""Damage anywhere in the ledger being written at a crash never moves an entry id."""

from __future__ import annotations

import struct
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sq_storage_helpers import FakeClock, commit

from starquake.storage import (
    EARLIEST,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    SqliteMetadataStore,
    StorageError,
)
from starquake.storage.segment import LEDGER_RECORD_HEADER_SIZE, RECORD_HEADER_SIZE

NAME = "persistent://public/default/damage"
FILE_HEADER = 16


def _write(root: Path, datas: list[bytes]) -> tuple[Path, list[tuple[int, int]]]:
    """Store ``datas`` in one ledger, then "crash" (no index file); the file and the ids."""
    store = SqliteMetadataStore(root / "meta.db")
    factory = ManagedLedgerFactory(root / "data", store, ManagedLedgerConfig(), clock=FakeClock())
    ml = factory.open(NAME)
    positions = [ml.append(d) for d in datas]
    commit(factory)
    directory = ml.directory
    factory.close()
    store.close()
    (ledger_id,) = {p.ledger_id for p in positions}
    (directory / f"{ledger_id}.idx").unlink(missing_ok=True)
    return directory / f"{ledger_id}.log", [(p.ledger_id, p.entry_id) for p in positions]


def _recover(root: Path) -> list[tuple[tuple[int, int], bytes]]:
    store = SqliteMetadataStore(root / "meta.db")
    factory = ManagedLedgerFactory(root / "data", store, ManagedLedgerConfig(), clock=FakeClock())
    try:
        entries = factory.open(NAME).read_entries_now(EARLIEST, 10_000)
        return [((e.position.ledger_id, e.position.entry_id), bytes(e.data)) for e in entries]
    finally:
        factory.close()
        store.close()


def _record_spans(datas: list[bytes], header: int) -> list[tuple[int, int]]:
    spans, pos = [], FILE_HEADER
    for data in datas:
        spans.append((pos, pos + header + len(data)))
        pos += header + len(data)
    return spans


@pytest.mark.parametrize("size", [0, 5])
def test_a_damaged_length_that_points_past_an_intact_record_is_not_followed(
    tmp_path: Path, size: int
) -> None:
    """The first record's length, damaged, names the third record (entry 2): following it
    would lose the intact entry 1 as well; only entry 0 is lost."""
    datas = [bytes([i]) * size for i in range(3)]
    path, ids = _write(tmp_path, datas)
    raw = bytearray(path.read_bytes())
    record = LEDGER_RECORD_HEADER_SIZE + size
    struct.pack_into("<I", raw, FILE_HEADER, size + record)  # one record too far
    path.write_bytes(bytes(raw))
    assert _recover(tmp_path) == [(ids[1], datas[1]), (ids[2], datas[2])]


def test_a_file_header_whose_version_was_damaged_into_another_is_read_by_its_records(
    tmp_path: Path,
) -> None:
    """Format 3 damaged into 2 (one bit of the version field): the records' CRC32C tells."""
    datas = [b"", b"abc"]
    path, ids = _write(tmp_path, datas)
    raw = bytearray(path.read_bytes())
    assert raw[4] == 3
    raw[4] ^= 1
    path.write_bytes(bytes(raw))
    assert _recover(tmp_path) == list(zip(ids, datas, strict=True))


@settings(max_examples=150, deadline=None)
@given(
    datas=st.lists(st.binary(min_size=0, max_size=60), min_size=1, max_size=30),
    data=st.data(),
)
def test_damage_of_any_byte_range_keeps_every_entry_id(
    datas: list[bytes], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path, ids = _write(root, datas)
        raw = bytearray(path.read_bytes())
        start = data.draw(st.integers(0, len(raw) - 1), label="start")
        length = data.draw(st.integers(1, min(400, len(raw) - start)), label="length")
        zero = data.draw(st.booleans(), label="zeroed")
        for i in range(start, start + length):
            raw[i] = 0 if zero else raw[i] ^ data.draw(st.integers(1, 255))
        changed = {i for i in range(start, start + length) if raw[i] != path.read_bytes()[i]}
        path.write_bytes(bytes(raw))
        spans = _record_spans(datas, LEDGER_RECORD_HEADER_SIZE)
        hit = [any(a <= i < b for i in changed) for a, b in spans]
        recovered = _recover(root)
        expected_all = dict(zip(ids, datas, strict=True))
        # never a wrong id: whatever is read is the entry that was stored under that id
        for position, payload in recovered:
            assert expected_all[position] == payload
        intact_after = [k for k, h in enumerate(hit) if not h and any(hit[:k])]
        if intact_after or not any(hit):
            # the damage is followed by an intact record: exactly the damaged entries are lost
            assert [p for p, _ in recovered] == [ids[k] for k, h in enumerate(hit) if not h]
        else:
            # damage reaching the end is a torn tail: the entries before it survive
            first_hit = hit.index(True)
            assert [p for p, _ in recovered] == ids[:first_hit]


def _zero_region_spanning_records(path: Path, first: int, count: int, header: int) -> None:
    raw = bytearray(path.read_bytes())
    pos = FILE_HEADER
    spans = []
    while pos < len(raw):
        (n,) = struct.unpack_from("<I", raw, pos)
        spans.append((pos, pos + header + n))
        pos += header + n
    a, b = spans[first][0] + 3, spans[first + count - 1][1] - 2
    raw[a:b] = bytes(b - a)
    path.write_bytes(bytes(raw))


def test_a_zeroed_region_spanning_five_records_loses_five_ids(tmp_path: Path) -> None:
    datas = [f"message-{i:03d}".encode() * 3 for i in range(30)]
    path, ids = _write(tmp_path, datas)
    _zero_region_spanning_records(path, 10, 5, LEDGER_RECORD_HEADER_SIZE)
    recovered = _recover(tmp_path)
    assert [p for p, _ in recovered] == ids[:10] + ids[15:]
    assert [d for _, d in recovered] == datas[:10] + datas[15:]


def _as_version_1(path: Path, datas: list[bytes]) -> None:
    """Rewrite a ledger file in the first format: version 1 header, records without ids."""
    header = bytearray(path.read_bytes()[:FILE_HEADER])
    header[4:6] = struct.pack("<H", 1)
    out = [bytes(header)]
    for data in datas:
        length = struct.pack("<I", len(data))
        out.append(length + struct.pack("<I", zlib.crc32(data, zlib.crc32(length))) + data)
    path.write_bytes(b"".join(out))


def test_a_version_1_file_is_read(tmp_path: Path) -> None:
    datas = [f"old-{i}".encode() for i in range(12)]
    path, ids = _write(tmp_path, datas)
    _as_version_1(path, datas)
    assert _recover(tmp_path) == list(zip(ids, datas, strict=True))
    # a flipped data byte in the old format still costs exactly one entry
    raw = bytearray(path.read_bytes())
    raw[_record_spans(datas, RECORD_HEADER_SIZE)[4][0] + RECORD_HEADER_SIZE] ^= 0x11
    path.write_bytes(bytes(raw))
    recovered = _recover(tmp_path)
    assert [p for p, _ in recovered] == ids[:4] + ids[5:]


def _as_version_2(path: Path, datas: list[bytes]) -> None:
    """Rewrite a ledger file in the second format: records with ids, zlib's CRC-32."""
    header = bytearray(path.read_bytes()[:FILE_HEADER])
    header[4:6] = struct.pack("<H", 2)
    out = [bytes(header)]
    for entry_id, data in enumerate(datas):
        covered = struct.pack("<IQ", len(data), entry_id)
        crc = zlib.crc32(data, zlib.crc32(covered))
        out.append(struct.pack("<IIQ", len(data), crc, entry_id) + data)
    path.write_bytes(b"".join(out))


def test_a_file_written_now_is_not_version_2(tmp_path: Path) -> None:
    datas = [f"new-{i}".encode() for i in range(3)]
    path, _ = _write(tmp_path, datas)
    raw = path.read_bytes()
    assert struct.unpack_from("<H", raw, 4) == (3,)
    _as_version_2(path, datas)
    assert path.read_bytes() != raw  # the CRCs differ: the test below reads another format


def test_a_version_2_file_is_read_and_its_damage_found(tmp_path: Path) -> None:
    datas = [f"v2-{i}".encode() * 3 for i in range(30)]
    path, ids = _write(tmp_path, datas)
    _as_version_2(path, datas)
    assert _recover(tmp_path) == list(zip(ids, datas, strict=True))
    raw = bytearray(path.read_bytes())
    raw[_record_spans(datas, LEDGER_RECORD_HEADER_SIZE)[4][1] - 1] ^= 0x11  # entry 4's data
    path.write_bytes(bytes(raw))
    assert [p for p, _ in _recover(tmp_path)] == ids[:4] + ids[5:]
    _zero_region_spanning_records(path, 10, 5, LEDGER_RECORD_HEADER_SIZE)
    recovered = _recover(tmp_path)
    assert [p for p, _ in recovered] == ids[:4] + ids[5:10] + ids[15:]
    assert [d for _, d in recovered] == datas[:4] + datas[5:10] + datas[15:]


def test_a_version_2_file_with_a_damaged_header_is_read(tmp_path: Path) -> None:
    datas = [f"v2-{i}".encode() for i in range(8)]
    path, ids = _write(tmp_path, datas)
    _as_version_2(path, datas)
    raw = bytearray(path.read_bytes())
    raw[0:FILE_HEADER] = bytes(FILE_HEADER)  # the format is found from the records
    path.write_bytes(bytes(raw))
    assert _recover(tmp_path) == list(zip(ids, datas, strict=True))


def test_a_version_1_region_of_unknown_extent_stops_with_an_error(tmp_path: Path) -> None:
    datas = [f"old-{i}".encode() * 4 for i in range(20)]
    path, _ = _write(tmp_path, datas)
    _as_version_1(path, datas)
    _zero_region_spanning_records(path, 10, 5, RECORD_HEADER_SIZE)
    with pytest.raises(StorageError, match=r"version 1.*entry ids.*not loaded"):
        _recover(tmp_path)
