from __future__ import annotations

import json

import pytest
from sq_storage_helpers import MakeFactory, append_all, commit, persist

from starquake.storage import (
    EARLIEST,
    LATEST,
    ManagedLedger,
    ManagedLedgerFactory,
    Position,
    StorageError,
)
from starquake.storage.read_now import read_now

NAME = "persistent://public/default/cursors"


def _ledger(
    make_factory: MakeFactory, n: int = 10, per_ledger: int = 4
) -> tuple[ManagedLedgerFactory, ManagedLedger, list[Position]]:
    f = make_factory(max_entries_per_ledger=per_ledger, min_rollover_seconds=0)
    ml = f.open(NAME)
    positions = append_all(ml, [f"m{i}".encode() for i in range(n)])
    commit(f)
    return f, ml, positions


def test_initial_positions(make_factory: MakeFactory) -> None:
    f, ml, positions = _ledger(make_factory)
    latest = ml.open_cursor("latest")
    earliest = ml.open_cursor("earliest", "earliest")
    assert ml.open_cursor("latest") is latest
    assert set(ml.cursors) == {"latest", "earliest"}
    assert latest.mark_delete_position == positions[-1]
    assert read_now(latest.read_entries(10)) == [] and not latest.has_more_entries()
    assert latest.backlog() == 0
    assert earliest.backlog() == 10 and earliest.has_more_entries()
    assert [e.position for e in read_now(earliest.read_entries(100))] == positions
    assert earliest.read_position == ml.next_position(positions[-1])
    new = ml.append(b"new")
    assert not latest.has_more_entries()
    assert latest.read_position == new
    commit(f)
    assert latest.has_more_entries()
    assert [e.data for e in read_now(latest.read_entries(5))] == [b"new"]
    assert latest.backlog() == 1


def test_read_skips_individually_acked(make_factory: MakeFactory) -> None:
    _, ml, positions = _ledger(make_factory)
    c = ml.open_cursor("s", "earliest")
    c.delete([positions[1], positions[2], positions[3], positions[4], positions[7]])
    assert c.mark_delete_position < positions[0]
    got = [e.position for e in read_now(c.read_entries(3))]
    assert got == [positions[0], positions[5], positions[6]]
    assert [e.position for e in read_now(c.read_entries(10))] == [positions[8], positions[9]]
    assert c.backlog() == 5
    c.rewind()
    assert c.read_position == positions[0]
    c.delete([positions[0]])  # mark-delete jumps over the acked ranges, across the ledger edge
    assert c.mark_delete_position == positions[4]
    assert c.read_position == positions[5]
    assert c.individually_deleted_ranges() == [
        (Position(positions[7].ledger_id, positions[7].entry_id - 1), positions[7])
    ]
    c.delete([positions[5], positions[6]])
    assert c.mark_delete_position == positions[7]
    assert c.individually_deleted_ranges() == []
    assert c.backlog() == 2
    assert c.is_acked(positions[3]) and not c.is_acked(positions[8])


def test_mark_delete(make_factory: MakeFactory) -> None:
    _, ml, positions = _ledger(make_factory)
    c = ml.open_cursor("s", "earliest")
    c.delete([positions[6]])
    assert c.mark_delete(positions[4])
    assert not c.mark_delete(positions[3])
    assert not c.mark_delete(positions[4])
    assert c.read_position == positions[5]
    assert c.mark_delete(positions[5])
    assert c.mark_delete_position == positions[6]  # joined with the individual ack
    with pytest.raises(StorageError):
        c.mark_delete(Position(positions[-1].ledger_id, 99))
    assert c.backlog() == 3


def test_seek_and_reset(make_factory: MakeFactory) -> None:
    _, ml, positions = _ledger(make_factory)
    c = ml.open_cursor("s", "earliest")
    c.mark_delete(positions[2])
    c.delete([positions[5]])
    c.seek(positions[7])
    assert c.read_position == positions[7]
    assert c.mark_delete_position == positions[2]
    c.seek(positions[1])  # never before the mark-delete position
    assert c.read_position == positions[3]
    c.seek(LATEST)
    assert c.read_position == ml.next_position(ml.last_confirmed)
    c.reset(positions[1])
    assert c.mark_delete_position == Position(positions[1].ledger_id, 0)
    assert c.read_position == positions[1]
    assert c.individually_deleted_ranges() == []
    assert c.backlog() == 9
    c.reset(EARLIEST)
    assert c.backlog() == 10 and c.read_position == positions[0]
    c.reset(LATEST)
    assert c.backlog() == 0 and read_now(c.read_entries(5)) == []


def test_non_durable_cursors(make_factory: MakeFactory) -> None:
    f, ml, positions = _ledger(make_factory)
    c = ml.new_non_durable_cursor(EARLIEST)
    assert not c.durable and "" not in ml.cursors
    assert [e.position for e in read_now(c.read_entries(100))] == positions
    c = ml.new_non_durable_cursor(LATEST)
    assert read_now(c.read_entries(100)) == []
    c = ml.new_non_durable_cursor(positions[5])
    assert read_now(c.read_entries(1))[0].position == positions[5]
    c = ml.new_non_durable_cursor(positions[5], inclusive=False)
    assert read_now(c.read_entries(1))[0].position == positions[6]
    c.mark_delete(positions[8])
    assert f.take_cursor_snapshots() == []


def test_batch_ack_sets(make_factory: MakeFactory) -> None:
    _, ml, positions = _ledger(make_factory)
    c = ml.open_cursor("s", "earliest")
    p = positions[0]
    assert c.get_batch_ack_set(p) is None
    # batch of 70 messages: ack index 0 and 65
    words = [-1 & ~1, (1 << 6) - 1 & ~2]
    assert not c.ack_batch_indexes(p, words, 70)
    assert c.get_batch_ack_set(p) == [-2, 0b111101]
    assert not c.is_acked(p)
    # the client only keeps bits it still has: intersect
    assert not c.ack_batch_indexes(p, [1 << 5 | 1 << 63, 0b100], 70)
    assert c.get_batch_ack_set(p) == [(1 << 5 | 1 << 63) - (1 << 64), 0b100]
    assert c.ack_batch_indexes(p, [0, 0], 70)
    assert c.get_batch_ack_set(p) is None
    assert c.is_acked(p) and c.mark_delete_position == p
    assert c.ack_batch_indexes(p, [1], 1)  # already acked
    # a partially acked entry cleared by a cumulative ack
    q = positions[3]
    c.ack_batch_indexes(q, [0b110], 3)
    assert c.get_batch_ack_set(q) == [0b110]
    c.mark_delete(q)
    assert c.get_batch_ack_set(q) is None


def test_persistence_and_recovery(make_factory: MakeFactory) -> None:
    f, ml, positions = _ledger(make_factory)
    c = ml.open_cursor("sub/1", "earliest")
    gone = ml.open_cursor("gone")
    c.mark_delete(positions[1])
    c.delete([positions[4], positions[5], positions[8]])
    c.ack_batch_indexes(positions[6], [0b1010], 4)
    snaps = dict(f.take_cursor_snapshots())
    assert set(snaps) == {ml.cursor_key("sub/1"), ml.cursor_key("gone")}
    raw = snaps[ml.cursor_key("sub/1")]
    assert raw is not None and json.loads(raw)["md"] == list(positions[1])
    f.metadata.put_many(snaps.items())
    assert f.take_cursor_snapshots() == []
    ml.delete_cursor("gone")
    assert gone.closed
    assert f.take_cursor_snapshots() == [(ml.cursor_key("gone"), None)]
    f.metadata.put_many([(ml.cursor_key("gone"), None)])
    c.delete([positions[9]])  # not persisted: lost by the "crash" below
    f.close()  # close persists everything; simulate the crash by rewriting the old state
    f.metadata.put_many(snaps.items())
    f.metadata.delete(ml.cursor_key("gone"))

    f2 = make_factory(max_entries_per_ledger=4, min_rollover_seconds=0)
    ml2 = f2.open(NAME)
    assert set(ml2.cursors) == {"sub/1"}
    c2 = ml2.open_cursor("sub/1")
    assert c2.mark_delete_position == positions[1]
    assert c2.individually_deleted_ranges() == [
        (Position(positions[4].ledger_id, -1), positions[5]),
        (Position(positions[8].ledger_id, -1), positions[8]),
    ]
    assert c2.get_batch_ack_set(positions[6]) == [0b1010]
    assert [e.position for e in read_now(c2.read_entries(100))] == [
        positions[2],
        positions[3],
        positions[6],
        positions[7],
        positions[9],
    ]
    assert c2.backlog() == 5


def test_clean_close_persists_cursors(make_factory: MakeFactory) -> None:
    f, ml, positions = _ledger(make_factory)
    c = ml.open_cursor("s", "earliest")
    c.delete([positions[3]])
    c.mark_delete(positions[1])
    f.close()
    f2 = make_factory(max_entries_per_ledger=4, min_rollover_seconds=0)
    c2 = f2.open(NAME).open_cursor("s")
    assert c2.mark_delete_position == positions[1]
    assert c2.is_acked(positions[3]) and not c2.is_acked(positions[2])


def test_mark_delete_in_trimmed_ledger(make_factory: MakeFactory) -> None:
    f, ml, positions = _ledger(make_factory)
    c = ml.open_cursor("s", "earliest")
    c.mark_delete(positions[5])
    persist(f)
    assert ml.trim() == 1
    f.close()
    f2 = make_factory(max_entries_per_ledger=4, min_rollover_seconds=0)
    ml2 = f2.open(NAME)
    c2 = ml2.open_cursor("s")
    assert c2.mark_delete_position == positions[5]
    assert [e.position for e in read_now(c2.read_entries(100))] == positions[6:]
    assert c2.backlog() == 4
    c2.mark_delete(positions[-1])
    persist(f2)
    assert ml2.trim() == 2
    # a cursor whose mark-delete now points into a deleted ledger
    assert c2.backlog() == 0 and not c2.has_more_entries()
    r = ml2.new_non_durable_cursor(positions[0])
    assert read_now(r.read_entries(10)) == []


def test_reopen_before_snapshot_flush_keeps_latest_acks(make_factory: MakeFactory) -> None:
    f, ml, positions = _ledger(make_factory)
    c = ml.open_cursor("s", "earliest")
    f.metadata.put_many(f.take_cursor_snapshots())
    c.mark_delete(positions[4])
    ml.close()
    ml2 = f.open(NAME)
    c2 = ml2.open_cursor("s")
    assert c2 is not c and c2.mark_delete_position == positions[4]
    c2.delete([positions[7]])
    snaps = f.take_cursor_snapshots()
    assert len(snaps) == 1 and snaps[0][1] == c2.serialize()
