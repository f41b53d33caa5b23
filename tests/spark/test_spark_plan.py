"""Range planning: pieces are contiguous, cover the range, and cut only at entries of the end's
ledger; long ranges are split without being asked."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from starquake.spark._plan import MAX_ENTRIES_PER_SPLIT, plan_ranges

positions = st.tuples(st.integers(0, 5), st.integers(0, 300_000), st.integers(0, 50))


@given(a=positions, b=positions, min_partitions=st.integers(0, 40))
def test_pieces_cover_the_range_contiguously(
    a: tuple[int, int, int], b: tuple[int, int, int], min_partitions: int
) -> None:
    start, end = min(a, b), max(a, b)
    pieces = plan_ranges({"t": start}, {"t": end}, min_partitions)
    if start == end:
        assert pieces == []
        return
    assert pieces[0].start == start and pieces[-1].end == end
    assert all(p.start < p.end for p in pieces)
    for left, right in itertools.pairwise(pieces):
        assert left.end == right.start
        assert right.start[0] == end[0] and right.start[2] == 0  # cut at an entry of that ledger


def test_a_long_range_is_split_without_min_partitions() -> None:
    end = (3, 4 * MAX_ENTRIES_PER_SPLIT, 0)
    pieces = plan_ranges({"t": (3, 0, 0)}, {"t": end}, 0)
    assert len(pieces) == 4
    assert plan_ranges({"t": (3, 0, 0)}, {"t": (3, 10, 0)}, 0)[0].end == (3, 10, 0)
