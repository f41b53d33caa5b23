from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from starquake.storage import Position, PositionRangeSet


def _model_intervals(model: set[tuple[int, int]]) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    for lid, eid in sorted(model):
        if out and out[-1][0] == lid and out[-1][2] == eid - 1:
            out[-1] = (lid, out[-1][1], eid)
        else:
            out.append((lid, eid, eid))
    return out


def test_merging() -> None:
    rs = PositionRangeSet()
    assert rs.add(1, 5) and rs.add(1, 7)
    assert list(rs.intervals()) == [(1, 5, 5), (1, 7, 7)]
    assert rs.add(1, 6)
    assert list(rs.intervals()) == [(1, 5, 7)]
    assert not rs.add(1, 6)
    rs.add(2, 0)  # a new ledger is never merged with the previous one
    assert list(rs.intervals()) == [(1, 5, 7), (2, 0, 0)]
    rs.add_range(1, 0, 10)
    assert list(rs.intervals()) == [(1, 0, 10), (2, 0, 0)]
    assert rs.size == 12 and len(rs) == 2
    assert Position(1, 3) in rs and Position(2, 1) not in rs and (0, 0) not in rs
    assert rs.range_containing(Position(1, 9)) == (1, 0, 10)
    assert rs.next_range_after(Position(1, 9)) == (2, 0, 0)
    rs.remove_up_to(Position(1, 4))
    assert list(rs.intervals()) == [(1, 5, 10), (2, 0, 0)]
    assert rs.count_between(Position(1, 7), Position(2, 5)) == 4
    rs.remove_up_to(Position(1, 99))
    assert rs.first() == (2, 0, 0)
    rs.clear()
    assert not rs and rs.first() is None


def test_increasing_acks_stay_one_interval() -> None:
    rs = PositionRangeSet()
    for i in range(100_000):
        rs.add(7, i)
    assert len(rs) == 1 and rs.size == 100_000


positions = st.tuples(st.integers(0, 3), st.integers(0, 30))
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), positions, st.just(0)),
        st.tuples(st.just("range"), positions, st.integers(0, 8)),
        st.tuples(st.just("trim"), positions, st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops, positions, positions)
def test_against_naive_set(
    operations: list[tuple[str, tuple[int, int], int]],
    probe_a: tuple[int, int],
    probe_b: tuple[int, int],
) -> None:
    rs = PositionRangeSet()
    model: set[tuple[int, int]] = set()
    for op, (lid, eid), extra in operations:
        if op == "add":
            assert rs.add(lid, eid) == ((lid, eid) not in model)
            model.add((lid, eid))
        elif op == "range":
            rs.add_range(lid, eid, eid + extra)
            model.update((lid, e) for e in range(eid, eid + extra + 1))
        else:
            rs.remove_up_to(Position(lid, eid))
            model = {p for p in model if p > (lid, eid)}
        assert list(rs.intervals()) == _model_intervals(model)
        assert rs.size == len(model)
    for lid in range(4):
        for eid in range(-1, 40):
            assert ((lid, eid) in rs) == ((lid, eid) in model)
    lo, hi = sorted([Position(*probe_a), Position(*probe_b)])
    assert rs.count_between(lo, hi) == sum(1 for p in model if lo < p <= hi)
