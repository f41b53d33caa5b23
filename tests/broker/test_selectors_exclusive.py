"""HashRangeExclusiveSelector: Key_Shared STICKY with consumer-declared slot ranges."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from starquake.broker.selectors import ConsumerAssignError, HashRangeExclusiveSelector


@dataclass(eq=False)
class Consumer:
    name: str
    consumer_id: int


Selector = HashRangeExclusiveSelector[Consumer]


def _snapshot(sel: Selector) -> tuple[object, ...]:
    probes = (0, 9, 10, 99, 100, 30000, 65535)
    return sel.consumers, sel.consumer_key_hash_ranges(), [sel.select(h) for h in probes]


def _two_consumers() -> tuple[Selector, Consumer, Consumer]:
    sel: Selector = HashRangeExclusiveSelector()
    a, b = Consumer("a", 1), Consumer("b", 2)
    sel.add_consumer(a, "a", [(0, 9), (100, 199)])
    sel.add_consumer(b, "b", [(10, 99)])
    return sel, a, b


def test_select_uses_slot_and_returns_none_for_uncovered() -> None:
    sel, a, b = _two_consumers()
    assert sel.select(0) is a
    assert sel.select(9) is a
    assert sel.select(10) is b
    assert sel.select(99) is b
    assert sel.select(100) is a
    assert sel.select(199) is a
    assert sel.select(200) is None
    assert sel.select(65535) is None
    assert sel.select(65536 * 7 + 50) is b  # slot = hash % 65536
    assert sel.select(2**31 - 1) is None  # slot 65535
    assert sel.consumer_key_hash_ranges() == {a: [(0, 9), (100, 199)], b: [(10, 99)]}


def test_empty_selector_selects_nobody() -> None:
    sel: Selector = HashRangeExclusiveSelector()
    assert sel.select(0) is None
    assert sel.consumer_key_hash_ranges() == {}


def test_ranges_are_reported_sorted_and_adjacent_ranges_are_fine() -> None:
    sel: Selector = HashRangeExclusiveSelector()
    c = Consumer("c", 1)
    sel.add_consumer(c, "c", [(20, 29), (0, 9), (10, 19)])
    assert sel.consumer_key_hash_ranges() == {c: [(0, 9), (10, 19), (20, 29)]}
    assert sel.select(19) is c


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        (None, "at least one hash range"),
        ([], "at least one hash range"),
        ([(-1, 5)], "invalid hash range"),
        ([(65000, 65536)], "invalid hash range"),
        ([(300, 200)], "invalid hash range"),
        ([(500, 600), (550, 700)], "overlap"),  # its own ranges overlap
        ([(5, 5)], "overlaps \\[0, 9\\] of another consumer"),
        ([(150, 250)], "overlaps \\[100, 199\\]"),
        ([(200, 300), (50, 60)], "overlaps \\[10, 99\\]"),
        ([(0, 65535)], "overlaps"),
    ],
)
def test_bad_ranges_are_refused_and_the_selector_is_unchanged(
    ranges: Sequence[tuple[int, int]] | None, message: str
) -> None:
    sel, _, _ = _two_consumers()
    before = _snapshot(sel)
    with pytest.raises(ConsumerAssignError, match=message):
        sel.add_consumer(Consumer("late", 3), "late", ranges)
    assert _snapshot(sel) == before


def test_consumer_assign_error_is_a_value_error() -> None:
    assert issubclass(ConsumerAssignError, ValueError)


def test_removal_frees_ranges_for_others() -> None:
    sel, a, b = _two_consumers()
    sel.remove_consumer(a)
    assert sel.select(0) is None
    assert sel.select(150) is None
    c = Consumer("c", 3)
    sel.add_consumer(c, "c", [(0, 9), (100, 65535)])
    assert sel.select(70000) is c  # slot 4464
    assert sel.consumers == [b, c]
    sel.remove_consumer(a)  # unknown: no-op
    assert sel.consumers == [b, c]


def test_same_name_consumers_and_duplicate_add() -> None:
    sel: Selector = HashRangeExclusiveSelector()
    x1, x2 = Consumer("x", 1), Consumer("x", 2)
    sel.add_consumer(x1, "x", [(0, 32767)])
    sel.add_consumer(x2, "x", [(32768, 65535)])
    assert sel.select(1) is x1
    assert sel.select(40000) is x2
    before = _snapshot(sel)
    with pytest.raises(ConsumerAssignError, match="already"):
        sel.add_consumer(x1, "x", [(0, 1)])
    assert _snapshot(sel) == before


def test_smaller_range_size() -> None:
    sel: Selector = HashRangeExclusiveSelector(range_size=16)
    c = Consumer("c", 1)
    with pytest.raises(ConsumerAssignError, match="end <= 15"):
        sel.add_consumer(c, "c", [(0, 16)])
    sel.add_consumer(c, "c", [(8, 15)])
    assert sel.select(16 + 9) is c
    assert sel.select(16 + 7) is None
