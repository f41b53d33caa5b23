"""Properties every selector keeps under any sequence of joins and leaves (hypothesis)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from starquake.broker.selectors import (
    HASH_SPACE_MAX,
    NONE_KEY,
    ConsistentHashingSelector,
    ConsumerAssignError,
    HashRangeAutoSplitSelector,
    HashRangeExclusiveSelector,
    StickyKeyConsumerSelector,
    slot_of,
    sticky_key_hash,
)


@dataclass(eq=False)
class Consumer:
    name: str
    consumer_id: int


@dataclass(frozen=True)
class Kind:
    label: str
    make: Callable[[], StickyKeyConsumerSelector[Consumer]]
    space: int  # number of slots (or hashes) the ranges live in
    sticky: bool = False
    ring: bool = False


KINDS = [
    Kind("auto-split", HashRangeAutoSplitSelector, 65536),
    Kind("auto-split-8", lambda: HashRangeAutoSplitSelector(range_size=8), 8),
    Kind("consistent", ConsistentHashingSelector, HASH_SPACE_MAX + 1, ring=True),
    Kind("consistent-3", lambda: ConsistentHashingSelector(3), HASH_SPACE_MAX + 1, ring=True),
    Kind("sticky", HashRangeExclusiveSelector, 65536, sticky=True),
    Kind("sticky-64", lambda: HashRangeExclusiveSelector(range_size=64), 64, sticky=True),
]

HASHES = st.lists(st.integers(0, HASH_SPACE_MAX), min_size=1, max_size=20)


def _ranges(space: int) -> st.SearchStrategy[list[tuple[int, int]]]:
    """Mostly valid, sometimes out-of-bounds or reversed, often overlapping ranges."""
    top = min(space, 65536)
    bound = st.integers(-1, top)
    pair = st.one_of(
        st.tuples(st.integers(0, top - 1), st.integers(0, top // 8)).map(
            lambda p: (p[0], min(p[0] + p[1], top - 1))
        ),
        st.tuples(bound, bound),
    )
    return st.lists(pair, max_size=3)


def _owned_slots(ranges: dict[Consumer, list[tuple[int, int]]]) -> list[tuple[int, int]]:
    return sorted({r for rs in ranges.values() for r in rs})


def _check(kind: Kind, sel: StickyKeyConsumerSelector[Consumer], model: list[Consumer]) -> None:
    assert sel.consumers == model
    ranges = sel.consumer_key_hash_ranges()
    assert list(ranges) == model
    distinct = _owned_slots(ranges)
    for (_, e1), (s2, _) in pairwise(distinct):
        assert e1 < s2, f"ranges overlap: {distinct}"
    if not kind.ring:  # hash-range selectors: one owner per range, never shared
        flat = [r for rs in ranges.values() for r in rs]
        assert len(flat) == len(distinct)
    if model and not kind.sticky:  # the ranges cover the whole space
        assert distinct[0][0] == 0 and distinct[-1][1] == kind.space - 1
        assert all(e + 1 == s for (_, e), (s, _) in pairwise(distinct))
    for consumer, owned in ranges.items():
        assert owned, "every consumer owns something"
        for start, end in owned:
            assert 0 <= start <= end < kind.space
            for h in (start, end):
                picked = sel.select(h)
                assert picked is not None and (start, end) in ranges[picked]
                if not kind.ring:
                    assert picked is consumer


def _check_select(
    kind: Kind, sel: StickyKeyConsumerSelector[Consumer], model: list[Consumer], hashes: list[int]
) -> None:
    ranges = sel.consumer_key_hash_ranges()
    for h in hashes:
        picked = sel.select(h)
        if not model:
            assert picked is None
        elif not kind.sticky:
            assert picked in model
        else:
            slot = h % kind.space
            owners = [c for c, rs in ranges.items() if any(s <= slot <= e for s, e in rs)]
            assert owners == ([picked] if picked is not None else [])


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.label)
@settings(max_examples=60, deadline=None)
@given(data=st.data(), hashes=HASHES)
def test_any_sequence_of_joins_and_leaves_keeps_the_invariants(
    kind: Kind, data: st.DataObject, hashes: list[int]
) -> None:
    sel = kind.make()
    model: list[Consumer] = []
    next_id = 0
    add = st.tuples(st.just("add"), st.sampled_from(["a", "b", "ab", "a1"]), _ranges(kind.space))
    no_ranges: list[tuple[int, int]] = []
    remove = st.tuples(st.just("remove"), st.integers(-1, 12), st.just(no_ranges))
    ops = data.draw(st.lists(st.one_of(add, remove), max_size=14))
    for op, arg, ranges in ops:
        if op == "add":
            assert isinstance(arg, str)
            consumer = Consumer(arg, next_id)
            next_id += 1
            before = (
                sel.consumers,
                sel.consumer_key_hash_ranges(),
                [sel.select(h) for h in hashes],
            )
            try:
                sel.add_consumer(consumer, arg, ranges if kind.sticky else None)
            except ConsumerAssignError:
                after = (sel.consumers, sel.consumer_key_hash_ranges())
                assert after == before[:2]
                assert [sel.select(h) for h in hashes] == before[2]
            else:
                model.append(consumer)
        else:
            assert isinstance(arg, int)
            if 0 <= arg < len(model):
                sel.remove_consumer(model.pop(arg))
            else:
                sel.remove_consumer(Consumer("ghost", -1))  # unknown: no-op
        _check(kind, sel, model)
        _check_select(kind, sel, model, hashes)


def test_sticky_key_hash_and_slot() -> None:
    assert sticky_key_hash(b"Order-3459134") == 964695987
    assert sticky_key_hash(NONE_KEY) == sticky_key_hash(b"NONE_KEY")
    assert 0 <= sticky_key_hash(NONE_KEY) <= HASH_SPACE_MAX
    assert slot_of(3112179635) == 6067
    assert slot_of(65536) == 0
    assert slot_of(HASH_SPACE_MAX) == 65535


def test_add_to_every_selector_with_the_same_call_shape() -> None:
    selectors: list[StickyKeyConsumerSelector[Consumer]] = [
        ConsistentHashingSelector(),
        HashRangeAutoSplitSelector(),
        HashRangeExclusiveSelector(),
    ]
    for sel in selectors:
        c = Consumer("c", 1)
        sel.add_consumer(c, c.name, [(0, 65535)])
        assert sel.select(sticky_key_hash(b"k")) is c
        sel.remove_consumer(c)
        assert sel.select(sticky_key_hash(b"k")) is None
