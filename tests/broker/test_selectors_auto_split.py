"""HashRangeAutoSplitSelector: Pulsar's halving of the largest range, then split/merge rules."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from starquake.broker.selectors import (
    ConsumerAssignError,
    HashRangeAutoSplitSelector,
    slot_of,
    sticky_key_hash,
)
from starquake.common.hashes import murmur3_32


@dataclass(eq=False)
class Consumer:
    name: str
    consumer_id: int


def _join(sel: HashRangeAutoSplitSelector[Consumer], name: str, cid: int) -> Consumer:
    consumer = Consumer(name, cid)
    sel.add_consumer(consumer, name)
    return consumer


def test_spec_worked_example() -> None:
    sel: HashRangeAutoSplitSelector[Consumer] = HashRangeAutoSplitSelector()
    assert sel.select(0) is None
    assert sel.consumer_key_hash_ranges() == {}

    c1 = _join(sel, "C1", 1)  # C1 [0, 65536)
    assert sel.consumer_key_hash_ranges() == {c1: [(0, 65535)]}

    c2 = _join(sel, "C2", 2)  # C2 [0, 32768), C1 [32768, 65536)
    assert sel.consumer_key_hash_ranges() == {c1: [(32768, 65535)], c2: [(0, 32767)]}

    c3 = _join(sel, "C3", 3)  # C3 [0, 16384), C2 [16384, 32768): the lowest of two largest
    assert sel.consumer_key_hash_ranges() == {
        c1: [(32768, 65535)],
        c2: [(16384, 32767)],
        c3: [(0, 16383)],
    }

    c4 = _join(sel, "C4", 4)  # C4 [32768, 49152), C1 [49152, 65536)
    assert sel.consumer_key_hash_ranges() == {
        c1: [(49152, 65535)],
        c2: [(16384, 32767)],
        c3: [(0, 16383)],
        c4: [(32768, 49151)],
    }
    assert sel.consumers == [c1, c2, c3, c4]

    # Key Order-3459134: SPEC quotes the raw murmur3 value; the masked 31-bit sticky-key hash
    # differs but, 65536 dividing 2**31, falls in the same slot 6067 -> C3.
    key = b"Order-3459134"
    assert murmur3_32(key) == 3112179635
    assert sticky_key_hash(key) == 964695987
    assert 3112179635 % 65536 == 6067
    assert slot_of(3112179635) == slot_of(sticky_key_hash(key)) == 6067
    assert sel.select(3112179635) is c3
    assert sel.select(sticky_key_hash(key)) is c3

    sel.remove_consumer(c4)  # C4's region merges right: C1 owns [32768, 65536) again
    assert sel.consumer_key_hash_ranges() == {
        c1: [(32768, 65535)],
        c2: [(16384, 32767)],
        c3: [(0, 16383)],
    }
    assert sel.select(sticky_key_hash(key)) is c3

    sel.remove_consumer(c1)  # the last region merges left: C2 owns [16384, 65536)
    assert sel.consumer_key_hash_ranges() == {c2: [(16384, 65535)], c3: [(0, 16383)]}
    assert sel.select(sticky_key_hash(key)) is c3
    assert sel.consumers == [c2, c3]


def test_region_boundaries_route_to_their_owner() -> None:
    sel: HashRangeAutoSplitSelector[Consumer] = HashRangeAutoSplitSelector()
    c1 = _join(sel, "C1", 1)
    c2 = _join(sel, "C2", 2)
    assert sel.select(32767) is c2
    assert sel.select(32768) is c1
    assert sel.select(65535) is c1
    assert sel.select(65536) is c2  # slot 0
    assert sel.select(2**31 - 1) is c1  # slot 65535


def test_removing_first_region_merges_right() -> None:
    sel: HashRangeAutoSplitSelector[Consumer] = HashRangeAutoSplitSelector()
    c1 = _join(sel, "C1", 1)
    c2 = _join(sel, "C2", 2)
    c3 = _join(sel, "C3", 3)
    sel.remove_consumer(c3)
    assert sel.consumer_key_hash_ranges() == {c1: [(32768, 65535)], c2: [(0, 32767)]}
    sel.remove_consumer(c2)
    assert sel.consumer_key_hash_ranges() == {c1: [(0, 65535)]}
    sel.remove_consumer(c1)
    assert sel.consumer_key_hash_ranges() == {}
    assert sel.select(123) is None


def test_odd_region_gives_the_newcomer_the_larger_lower_part() -> None:
    sel: HashRangeAutoSplitSelector[Consumer] = HashRangeAutoSplitSelector(range_size=4)
    a = _join(sel, "a", 1)  # a [0, 4)
    b = _join(sel, "b", 2)  # b [0, 2), a [2, 4)
    c = _join(sel, "c", 3)  # c [0, 1), b [1, 2), a [2, 4)
    sel.remove_consumer(b)  # merges right: c [0, 1), a [1, 4) -- a region of 3 slots
    assert sel.consumer_key_hash_ranges() == {a: [(1, 3)], c: [(0, 0)]}
    d = _join(sel, "d", 4)  # d takes 3 - 3 // 2 = 2 slots: d [1, 3), a keeps [3, 4)
    assert sel.consumer_key_hash_ranges() == {a: [(3, 3)], c: [(0, 0)], d: [(1, 2)]}
    assert [sel.select(h) for h in range(4)] == [c, d, d, a]


def test_full_selector_refuses_a_consumer_and_stays_unchanged() -> None:
    sel: HashRangeAutoSplitSelector[Consumer] = HashRangeAutoSplitSelector(range_size=2)
    a = _join(sel, "a", 1)
    b = _join(sel, "b", 2)
    before = sel.consumer_key_hash_ranges()
    with pytest.raises(ConsumerAssignError, match="no hash range left"):
        _join(sel, "c", 3)
    assert sel.consumer_key_hash_ranges() == before
    assert sel.consumers == [a, b]


def test_same_name_consumers_are_distinct_and_unknown_removal_is_a_noop() -> None:
    sel: HashRangeAutoSplitSelector[Consumer] = HashRangeAutoSplitSelector()
    x1 = _join(sel, "x", 1)
    x2 = _join(sel, "x", 2)
    assert sel.consumer_key_hash_ranges() == {x1: [(32768, 65535)], x2: [(0, 32767)]}
    sel.remove_consumer(Consumer("x", 1))  # equal fields, different object
    assert sel.consumers == [x1, x2]
    with pytest.raises(ConsumerAssignError, match="already"):
        sel.add_consumer(x1, "x")
    assert sel.consumers == [x1, x2]


@pytest.mark.parametrize("size", [0, 1, 3, 65535, 2**32])
def test_range_size_must_be_a_power_of_two(size: int) -> None:
    with pytest.raises(ValueError, match="power of two"):
        HashRangeAutoSplitSelector[Consumer](range_size=size)
