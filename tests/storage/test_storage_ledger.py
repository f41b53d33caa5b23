from __future__ import annotations

import os
from pathlib import Path

import pytest
from sq_storage_helpers import FakeClock, MakeFactory, append_all, commit, persist

from starquake.storage import (
    EARLIEST,
    Entry,
    LedgerBusyError,
    LedgerFencedError,
    Position,
    RetentionLimits,
    StorageError,
)
from starquake.storage.segment import LEDGER_RECORD_HEADER_SIZE
from starquake.storage.state import ENTRY_OVERHEAD

NAME = "persistent://public/default/my-topic-partition-3"


def test_append_is_invisible_until_commit_finishes(make_factory: MakeFactory) -> None:
    f = make_factory()
    ml = f.open(NAME)
    lid = ml.current_ledger_id
    assert ml.last_confirmed == Position(lid, -1)
    assert ml.append(b"a") == Position(lid, 0)
    assert ml.append(b"b") == Position(lid, 1)
    assert ml.read_entries_now(EARLIEST, 10) == []
    pending = f.take_pending()
    assert pending is not None
    assert pending.entry_count == 2 and pending.byte_count == 2
    ml.append(b"c")  # taken by the next commit
    pending.execute()
    assert ml.read_entries_now(EARLIEST, 10) == []
    assert pending.finish() == [(ml, Position(lid, 1))]
    assert ml.last_confirmed == Position(lid, 1)
    assert [e.data for e in ml.read_entries_now(EARLIEST, 10)] == [b"a", b"b"]
    assert commit(f) == [(ml, Position(lid, 2))]
    assert f.take_pending() is None


def test_open_returns_same_instance_and_names(make_factory: MakeFactory) -> None:
    f = make_factory()
    ml = f.open(NAME)
    assert f.open(NAME) is ml
    assert f.exists(NAME) and not f.exists("other")
    f.open("persistent://t/ns/x")
    assert f.list_names() == [
        "persistent://public/default/my-topic-partition-3",
        "persistent://t/ns/x",
    ]
    ml.close()
    ml2 = f.open(NAME)
    assert ml2 is not ml


def test_reads_cross_ledgers_and_respect_limits(make_factory: MakeFactory) -> None:
    f = make_factory(max_entries_per_ledger=3, min_rollover_seconds=0)
    ml = f.open(NAME)
    datas = [bytes([i]) * (i + 1) for i in range(10)]
    positions = append_all(ml, datas)
    commit(f)
    assert len({p.ledger_id for p in positions}) == 4
    assert [p.entry_id for p in positions] == [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]
    entries = ml.read_entries_now(EARLIEST, 100)
    assert [e.position for e in entries] == positions
    assert [e.data for e in entries] == datas
    assert [e.position for e in ml.read_entries_now(positions[4], 3)] == positions[4:7]
    # (L, -1) and a position past the end of a sealed ledger
    assert ml.read_entries_now(Position(positions[3].ledger_id, -1), 1)[0].position == positions[3]
    assert ml.read_entries_now(Position(positions[0].ledger_id, 7), 1)[0].position == positions[3]
    # byte budget: at least one entry, then stop before exceeding
    assert [e.data for e in ml.read_entries_now(positions[0], 10, max_bytes=4)] == datas[:2]
    assert [e.data for e in ml.read_entries_now(positions[9], 10, max_bytes=1)] == datas[9:]
    assert ml.read_entry_now(positions[5]) == Entry(positions[5], datas[5])
    assert ml.read_entry_now(Position(positions[5].ledger_id, 9)) is None
    assert ml.next_position(positions[2]) == positions[3]
    assert ml.next_position(positions[1]) == positions[2]
    assert ml.next_position(EARLIEST) == positions[0]
    assert ml.first_position() == positions[0]
    assert ml.count_entries(EARLIEST, ml.last_confirmed) == 10
    assert ml.count_entries(positions[1], positions[7]) == 6
    assert ml.number_of_entries == 10
    assert ml.total_size == sum(len(d) + LEDGER_RECORD_HEADER_SIZE for d in datas)


def test_reads_from_files_when_cache_is_small(make_factory: MakeFactory) -> None:
    f = make_factory(cache_max_bytes=10, max_entries_per_ledger=4, min_rollover_seconds=0)
    ml = f.open(NAME)
    datas = [os.urandom(7) for _ in range(20)]
    positions = append_all(ml, datas)
    commit(f)
    assert f.cache.size <= 10
    entries = ml.read_entries_now(EARLIEST, 100)
    assert [e.data for e in entries] == datas
    assert [e.position for e in entries] == positions
    assert ml.read_entry_now(positions[0]) == Entry(positions[0], datas[0])


def test_rollover_by_entries_waits_for_min_age(make_factory: MakeFactory, clock: FakeClock) -> None:
    f = make_factory(max_entries_per_ledger=2, min_rollover_seconds=10, max_rollover_seconds=100)
    ml = f.open(NAME)
    first = ml.current_ledger_id
    positions = append_all(ml, [b"x"] * 4)
    assert {p.ledger_id for p in positions} == {first}  # younger than min_rollover
    clock.advance(10)
    p = ml.append(b"y")
    assert p.ledger_id > first and p.entry_id == 0


def test_rollover_by_size(make_factory: MakeFactory) -> None:
    f = make_factory(max_size_per_ledger_bytes=100, min_rollover_seconds=0)
    ml = f.open(NAME)
    a = ml.append(b"x" * 90)
    b = ml.append(b"x")
    assert b.ledger_id > a.ledger_id


def test_rollover_by_age(make_factory: MakeFactory, clock: FakeClock) -> None:
    f = make_factory(max_rollover_seconds=50)
    ml = f.open(NAME)
    clock.advance(100)
    assert not ml.maybe_rollover()  # an empty ledger never rolls over
    ml.close()
    ml = f.open(NAME)  # fresh ledger, created now
    a = ml.append(b"1")
    clock.advance(49)
    assert not ml.maybe_rollover()
    b = ml.append(b"2")
    assert b.ledger_id == a.ledger_id
    clock.advance(1)
    assert ml.maybe_rollover()
    c = ml.append(b"3")
    assert c == Position(ml.current_ledger_id, 0) and c.ledger_id > a.ledger_id
    commit(f)
    assert [e.data for e in ml.read_entries_now(EARLIEST, 10)] == [b"1", b"2", b"3"]


def test_rolled_ledger_file_closed_after_last_commit(make_factory: MakeFactory) -> None:
    f = make_factory(max_entries_per_ledger=1, min_rollover_seconds=0)
    ml = f.open(NAME)
    ml.append(b"a")
    pending = f.take_pending()
    assert pending is not None
    ml.append(b"b")  # rolls over while the first ledger's bytes are in flight
    state0 = ml._states[ml._ids[0]]
    assert state0.sealed and state0.fd >= 0
    pending.execute()
    pending.finish()
    assert state0.fd == -1
    commit(f)  # also writes the index of the sealed ledger
    assert (state0.directory / f"{state0.ledger_id}.idx").exists()


def test_reopen_recovers_and_starts_new_ledger(make_factory: MakeFactory) -> None:
    f = make_factory(max_entries_per_ledger=5, min_rollover_seconds=0)
    ml = f.open(NAME)
    datas = [f"m{i}".encode() for i in range(12)]
    positions = append_all(ml, datas)
    commit(f)
    old_ids = [i.ledger_id for i in ml.ledgers()]
    f.close()
    f2 = make_factory(max_entries_per_ledger=5, min_rollover_seconds=0)
    ml2 = f2.open(NAME)
    assert [e.data for e in ml2.read_entries_now(EARLIEST, 100)] == datas
    assert [e.position for e in ml2.read_entries_now(EARLIEST, 100)] == positions
    assert ml2.last_confirmed == positions[-1]
    assert ml2.current_ledger_id > max(old_ids)
    p = ml2.append(b"new")
    assert p == Position(ml2.current_ledger_id, 0)
    commit(f2)
    assert ml2.read_entries_now(ml2.next_position(positions[-1]), 5)[0].data == b"new"


def test_ledger_ids_never_reused(make_factory: MakeFactory) -> None:
    created: list[int] = []
    for _ in range(4):
        f = make_factory(ledger_id_reserve=3, max_entries_per_ledger=1, min_rollover_seconds=0)
        ml = f.open(NAME)
        created.append(ml.current_ledger_id)
        for _ in range(3):
            ml.append(b"x")
            if ml.current_ledger_id != created[-1]:
                created.append(ml.current_ledger_id)
        commit(f)
        f.delete(NAME)
        created.append(f.open("other").current_ledger_id)
        f.close()
    assert created == sorted(created) and len(set(created)) == len(created)


def test_ledger_ids_strictly_increase_across_restarts(make_factory: MakeFactory) -> None:
    ids: list[int] = []
    for _ in range(5):
        f = make_factory(ledger_id_reserve=2)
        f.delete(NAME)
        ids.append(f.open(NAME).current_ledger_id)
        f.close()
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_trim_without_cursors_frees_files(make_factory: MakeFactory) -> None:
    f = make_factory(max_entries_per_ledger=2, min_rollover_seconds=0)
    ml = f.open(NAME)
    positions = append_all(ml, [b"x"] * 7)
    commit(f)
    commit(f)
    directory = ml._directory
    assert len(list(directory.glob("*.log"))) == 4
    assert ml.trim() == 3  # never the current ledger
    assert ml.number_of_entries == 1
    commit(f)  # the commit thread deletes the files, then fsyncs the directory
    assert [p.name for p in directory.glob("*.log")] == [f"{ml.current_ledger_id}.log"]
    assert not list(directory.glob("*.idx"))
    assert ml.first_position() == positions[-1]
    assert ml.read_entries_now(EARLIEST, 10)[0].position == positions[-1]
    assert ml.read_entries_now(positions[0], 10)[0].position == positions[-1]
    assert ml.number_of_entries == 1


def test_trim_respects_durable_cursors(make_factory: MakeFactory) -> None:
    f = make_factory(max_entries_per_ledger=2, min_rollover_seconds=0)
    ml = f.open(NAME)
    slow = ml.open_cursor("slow", "earliest")
    fast = ml.open_cursor("fast", "earliest")
    ml.new_non_durable_cursor(EARLIEST)  # does not hold back trimming
    positions = append_all(ml, [b"x"] * 6)
    commit(f)
    fast.mark_delete(positions[-1])
    persist(f)
    assert ml.trim() == 0
    slow.mark_delete(positions[2])  # into the second ledger
    assert ml.trim() == 0  # not stored yet: a crash would bring the old position back
    persist(f)
    assert ml.trim() == 1
    slow.mark_delete(positions[3])
    persist(f)
    assert ml.trim() == 1
    assert ml.trim(RetentionLimits(-1, -1)) == 0  # nothing more is consumed
    slow.mark_delete(positions[5])
    persist(f)
    assert ml.trim() == 0  # the last ledger is still the current one
    assert ml.maybe_rollover()
    assert ml.trim(RetentionLimits(-1, -1)) == 0  # infinite retention keeps it
    assert ml.trim(RetentionLimits(0, 0)) == 1
    assert ml.first_position() is None
    assert ml.last_confirmed == Position(ml.current_ledger_id, -1)
    assert slow.backlog() == 0


def test_find_first(make_factory: MakeFactory) -> None:
    f = make_factory(max_entries_per_ledger=3, min_rollover_seconds=0)
    ml = f.open(NAME)
    positions = append_all(ml, [i.to_bytes(2, "big") for i in range(11)])
    commit(f)
    for k in range(11):
        assert ml.find_first_now(lambda e, k=k: int.from_bytes(e.data, "big") >= k) == positions[k]
    assert ml.find_first_now(lambda e: False) is None
    assert ml.find_first_now(lambda e: True) == positions[0]


def test_failed_commit_fences(make_factory: MakeFactory) -> None:
    f = make_factory()
    ml = f.open(NAME)
    other = f.open("other")
    ml.append(b"ok")
    commit(f)
    ml.append(b"lost")
    other.append(b"lost too")
    pending = f.take_pending()
    assert pending is not None
    assert set(pending.fail(OSError("disk on fire"))) == {ml, other}
    assert ml.fenced
    with pytest.raises(LedgerFencedError):
        ml.append(b"x")
    assert [e.data for e in ml.read_entries_now(EARLIEST, 10)] == [b"ok"]
    ml2 = f.open(NAME)  # reopen recovers from disk
    assert ml2 is not ml and not ml2.fenced
    assert [e.data for e in ml2.read_entries_now(EARLIEST, 10)] == [b"ok"]
    ml2.append(b"again")
    commit(f)
    assert [e.data for e in ml2.read_entries_now(EARLIEST, 10)] == [b"ok", b"again"]


def test_later_commit_of_fenced_ledger_stays_invisible(make_factory: MakeFactory) -> None:
    f = make_factory()
    ml = f.open(NAME)
    ml.append(b"a")
    first = f.take_pending()
    ml.append(b"b")
    second = f.take_pending()
    assert first is not None and second is not None
    first.fail(OSError("boom"))
    second.execute()
    assert second.finish() == []
    assert ml.read_entries_now(EARLIEST, 10) == []


def test_reopen_while_in_flight_is_busy(make_factory: MakeFactory) -> None:
    f = make_factory()
    ml = f.open(NAME)
    ml.append(b"a")
    ml.close()
    with pytest.raises(StorageError):
        ml.append(b"b")
    with pytest.raises(LedgerBusyError):
        f.open(NAME)
    assert commit(f) == [(ml, ml.last_confirmed)]
    ml2 = f.open(NAME)
    assert [e.data for e in ml2.read_entries_now(EARLIEST, 10)] == [b"a"]


def test_delete_removes_files_and_cursors(make_factory: MakeFactory, tmp_path: Path) -> None:
    f = make_factory()
    ml = f.open(NAME)
    ml.open_cursor("sub")
    ml.append(b"a")
    commit(f)
    f.metadata.put_many(f.take_cursor_snapshots())
    assert f.metadata.list_children(ml.cursor_prefix) == ["sub"]
    ml.append(b"pending")
    f.delete(NAME)
    assert f.take_pending() is None
    assert not f.exists(NAME) and f.list_names() == []
    assert f.metadata.list_children(ml.cursor_prefix) == []
    ml2 = f.open(NAME)
    assert ml2.read_entries_now(EARLIEST, 10) == [] and not ml2.cursors


def test_a_detached_ledger_frees_its_name_at_once_and_goes_with_its_removal(
    make_factory: MakeFactory,
) -> None:
    """detach (on the event loop) only renames; the files go in remove_detached (a thread)."""
    f = make_factory()
    ml = f.open(NAME)
    ml.open_cursor("sub")
    append_all(ml, [b"old"] * 3)
    commit(f)
    detached = f.detach(NAME)
    assert detached is not None and detached.parent == f.base_dir
    assert sorted(p.suffix for p in detached.iterdir()) == [".log"]  # the files, moved aside
    assert not f.exists(NAME) and f.list_names() == []
    again = f.open(NAME)  # the name is free while the old files are still there
    again.append(b"new")
    commit(f)
    f.remove_detached(detached)
    assert not detached.exists()
    assert f.list_names() == [NAME]
    assert [e.data for e in again.read_entries_now(EARLIEST, 10)] == [b"new"]
    assert f.detach("persistent://public/default/never-stored") is None


def test_a_deletion_a_crash_interrupted_is_finished_by_the_next_start(
    make_factory: MakeFactory,
) -> None:
    f = make_factory()
    ml = f.open(NAME)
    append_all(ml, [b"x" * 1000] * 5)
    commit(f)
    detached = f.detach(NAME)  # the crash comes before remove_detached
    assert detached is not None and detached.exists()
    f2 = make_factory()  # a restart over the same directory
    assert not detached.exists()
    assert f2.list_names() == [] and not f2.exists(NAME)
    assert f2.open(NAME).read_entries_now(EARLIEST, 10) == []


def test_ledgers_info(make_factory: MakeFactory, clock: FakeClock) -> None:
    f = make_factory(max_entries_per_ledger=2, min_rollover_seconds=0)
    ml = f.open(NAME)
    append_all(ml, [b"abc"] * 3)
    commit(f)
    infos = ml.ledgers()
    assert [(i.entries, i.size_bytes) for i in infos] == [(2, 38), (1, 19)]  # 16-byte headers
    assert all(i.created_at == clock.now for i in infos)


def test_close_factory_flushes_pending(make_factory: MakeFactory) -> None:
    f = make_factory()
    ml = f.open(NAME)
    positions = append_all(ml, [b"a", b"b"])
    f.close()
    f2 = make_factory()
    entries = f2.open(NAME).read_entries_now(EARLIEST, 10)
    assert [e.position for e in entries] == positions


def test_many_ledgers_share_one_commit(make_factory: MakeFactory) -> None:
    f = make_factory()
    mls = [f.open(f"t{i}") for i in range(5)]
    for ml in mls:
        ml.append(ml.name.encode())
    pending = f.take_pending()
    assert pending is not None and pending.entry_count == 5
    pending.execute()
    result = dict(pending.finish())
    assert set(result) == set(mls)
    for ml in mls:
        assert ml.read_entries_now(EARLIEST, 2)[0].data == ml.name.encode()


def test_cache_accounting(make_factory: MakeFactory) -> None:
    cost = 100 + ENTRY_OVERHEAD
    f = make_factory(
        cache_max_bytes=10 * cost,
        cache_eviction_watermark=0.5,
        max_entries_per_ledger=10,
        min_rollover_seconds=0,
    )
    a = f.open("a")
    b = f.open("b")
    a.open_cursor("s").set_active()
    b.open_cursor("s").set_active()
    append_all(a, [b"x" * 100] * 8)
    append_all(b, [b"y" * 100] * 8)
    # the 11th entry went over 10: the 6 oldest went (down to half), then 5 more came
    assert f.cache.size == 10 * cost and f.cache.entries == 10
    commit(f)
    state_a = a._states[a.current_ledger_id]
    assert f.cache.get(state_a, 5) is None and f.cache.get(state_a, 6) is not None
    assert [e.data for e in a.read_entries_now(EARLIEST, 100)] == [b"x" * 100] * 8
    b.close()
    assert f.cache.size == 2 * cost  # a keeps its two newest entries
    f.delete("a")
    assert f.cache.size == 0
