"""The entry cache: what it takes (appends while a cursor is active), its byte bound with the
eviction watermark, its time threshold, and reads across entries it did not take."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from hypothesis import given, settings
from hypothesis import strategies as st
from sq_storage_helpers import MakeFactory, append_all, commit

from starquake.storage import EARLIEST
from starquake.storage.state import ENTRY_OVERHEAD, EntryCache, LedgerOwner, LedgerState


def test_appends_without_an_active_cursor_are_not_cached(make_factory: MakeFactory) -> None:
    f = make_factory()
    ml = f.open("t")
    cursor = ml.open_cursor("s")  # open, but no consumer reads through it
    datas = [bytes([i]) * 50 for i in range(20)]
    append_all(ml, datas)
    commit(f)
    assert f.cache.size == 0 and f.cache.entries == 0
    assert not ml.has_active_cursors()
    assert [e.data for e in ml.read_entries_now(EARLIEST, 100)] == datas
    cursor.set_active()
    assert ml.has_active_cursors()
    ml.append(b"new")
    assert f.cache.entries == 1
    cursor.close()  # closing deactivates
    assert not ml.has_active_cursors()


def test_reads_cross_runs_cached_and_not(make_factory: MakeFactory) -> None:
    f = make_factory()
    ml = f.open("t")
    cursor = ml.new_non_durable_cursor(EARLIEST)
    datas = [f"entry-{i}".encode() for i in range(30)]
    for i, data in enumerate(datas):
        if i % 7 == 0:
            cursor.set_active()
        elif i % 7 == 3:
            cursor.set_inactive()
        ml.append(data)
    commit(f)
    state = ml._states[ml.current_ledger_id]
    cached = [i for i in range(30) if f.cache.get(state, i) is not None]
    assert cached == [i for i in range(30) if i % 7 < 3]
    assert [e.data for e in ml.read_entries_now(EARLIEST, 100)] == datas
    for first in range(30):  # every start, cached or not
        start = ml.normalize((ml.current_ledger_id, first))
        assert [e.data for e in ml.read_entries_now(start, 5)] == datas[first : first + 5]


def test_size_eviction_goes_down_to_the_watermark(make_factory: MakeFactory) -> None:
    cost = 10 + ENTRY_OVERHEAD
    f = make_factory(cache_max_bytes=100 * cost, cache_eviction_watermark=0.9)
    ml = f.open("t")
    ml.open_cursor("s").set_active()
    append_all(ml, [b"0123456789"] * 100)
    assert f.cache.entries == 100
    ml.append(b"0123456789")
    assert f.cache.entries == 90 and f.cache.size == 90 * cost


def _state(ledger_id: int) -> LedgerState:
    return LedgerState(cast(LedgerOwner, None), ledger_id, Path("."), 0.0)


def test_time_threshold_evicts_what_was_cached_before_an_old_enough_mark() -> None:
    cache = EntryCache(1 << 30)
    state = _state(1)
    for _ in range(3):
        cache.add(state, b"old")
    assert cache.evict_older_than(10.0, 1.0) == 0  # marks 3 entries at t=10
    cache.add(state, b"new")
    assert cache.evict_older_than(10.5, 1.0) == 0  # the t=10 mark is not a second old yet
    assert cache.evict_older_than(11.0, 1.0) == 3  # the 3 cached before t=10 go
    assert [cache.get(state, i) for i in range(4)] == [None, None, None, b"new"]
    assert cache.evict_older_than(11.6, 1.0) == 1  # cached before the t=10.5 mark
    assert cache.size == 0 and cache.entries == 0


def test_time_marks_survive_the_compaction_of_dropped_ledgers_references() -> None:
    """Dropping a ledger with many cached entries compacts the eviction order (its stale
    references go); the time marks keep pointing between the same live entries."""
    cache = EntryCache(1 << 30)
    big, kept = _state(1), _state(2)
    cache.add(kept, b"k0")
    for _ in range(5000):
        cache.add(big, b"b")
    cache.evict_older_than(10.0, 1.0)  # mark: k0 and the 5000 before t=10
    cache.add(kept, b"k1")
    for _ in range(100):
        cache.add(big, b"b")
    cache.evict_older_than(10.5, 1.0)  # mark: k1 before t=10.5
    cache.add(kept, b"k2")
    cache.drop(big)  # 5100 stale references among 3 live: compacted
    assert cache.entries == 3
    assert cache.evict_older_than(11.0, 1.0) == 1  # only k0 was cached before t=10
    assert [cache.get(kept, i) for i in range(3)] == [None, b"k1", b"k2"]
    assert cache.evict_older_than(11.5, 1.0) == 1  # k1, cached before t=10.5
    assert [cache.get(kept, i) for i in range(3)] == [None, None, b"k2"]
    assert cache.entries == 1 and cache.size == 2 + ENTRY_OVERHEAD


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 2), st.integers(0, 300)),
        st.tuples(st.just("skip"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("tick"), st.integers(0, 2), st.integers(1, 800)),
        st.tuples(st.just("drop"), st.integers(0, 2), st.just(0)),
    ),
    max_size=300,
)


@settings(max_examples=150, deadline=None)
@given(
    ops=_OPS,
    max_bytes=st.integers(0, 4000),
    watermark=st.sampled_from([0.0, 0.5, 0.9, 1.0]),
)
def test_cache_model(ops: list[tuple[str, int, int]], max_bytes: int, watermark: float) -> None:
    """Against a model: the size is the cost of what is cached and never above the bound
    after an add; a cached entry holds the bytes appended; an entry cached before a mark at
    least a threshold old is gone; a dropped ledger holds nothing."""
    cache = EntryCache(max_bytes, watermark)
    states = [_state(i) for i in range(3)]
    appended: list[list[bytes | None]] = [[], [], []]  # None: appended, not cached
    added_at: dict[tuple[int, int], int] = {}  # (ledger, entry) -> ticks before its add
    ticks: list[float] = []
    now = 0.0
    threshold = 1.0
    for op, i, arg in ops:
        state = states[i]
        if op == "add":
            data = bytes([i]) * arg
            added_at[(i, len(appended[i]))] = len(ticks)
            appended[i].append(data)
            cache.add(state, data)
            assert cache.size <= max_bytes
        elif op == "skip":
            appended[i].append(None)
            cache.skip(state)
        elif op == "tick":
            now += arg / 1000
            ticks.append(now)
            cache.evict_older_than(now, threshold)
        else:
            cache.drop(state)
            states[i] = _state(i)
            appended[i] = []
            added_at = {k: v for k, v in added_at.items() if k[0] != i}
        live = 0
        size = 0
        for j, st_ in enumerate(states):
            for eid, data in enumerate(appended[j]):
                got = cache.get(st_, eid)
                if data is None:
                    assert got is None
                    continue
                if got is not None:
                    assert got == data
                    live += 1
                    size += len(data) + ENTRY_OVERHEAD
                    # no mark made after its add is a threshold old
                    assert all(t > now - threshold for t in ticks[added_at[(j, eid)] :])
        assert cache.entries == live and cache.size == size
