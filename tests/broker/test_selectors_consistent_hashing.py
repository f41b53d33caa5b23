"""ConsistentHashingSelector: Pulsar 2.x's ring of consumer points (hashes of name + index)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from starquake.broker.selectors import (
    HASH_SPACE_MAX,
    ConsistentHashingSelector,
    ConsumerAssignError,
    sticky_key_hash,
)
from starquake.common.hashes import murmur3_32_masked


@dataclass(eq=False)
class Consumer:
    name: str
    consumer_id: int


Selector = ConsistentHashingSelector[Consumer]

# Letter-only names: "name + str(i)" then parses uniquely, so points of different consumers can
# only meet through a 31-bit hash collision (which the tests rule out with ``assume``).
NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)
KEYS = st.lists(st.binary(max_size=12), min_size=1, max_size=200)


def _points(name: str, replicas: int = 100) -> set[int]:
    return {murmur3_32_masked(f"{name}{i}".encode()) for i in range(replicas)}


def _no_shared_points(names: list[str]) -> bool:
    seen: set[int] = set()
    for name in names:
        points = _points(name)
        if len(points) < 100 or points & seen:
            return False
        seen |= points
    return True


def _build(names: list[str]) -> tuple[Selector, list[Consumer]]:
    sel: Selector = ConsistentHashingSelector()
    consumers = [Consumer(name, i) for i, name in enumerate(names)]
    for consumer in consumers:
        sel.add_consumer(consumer, consumer.name)
    return sel, consumers


def _flat_ranges(sel: Selector) -> list[tuple[int, int, Consumer]]:
    return sorted(
        (start, end, consumer)
        for consumer, ranges in sel.consumer_key_hash_ranges().items()
        for start, end in ranges
    )


def test_empty_ring_selects_nobody() -> None:
    sel: Selector = ConsistentHashingSelector()
    assert sel.select(12345) is None
    assert sel.consumer_key_hash_ranges() == {}
    assert sel.consumers == []


def test_point_keys_follow_pulsar_2x() -> None:
    sel: Selector = ConsistentHashingSelector(replica_points=3)
    c = Consumer("orders", 1)
    sel.add_consumer(c, c.name)
    points = sorted(murmur3_32_masked(f"orders{i}".encode()) for i in range(3))
    assert [end for _, end, _ in _flat_ranges(sel)][:3] == points
    for point in points:
        assert sel.select(point) is c


def test_key_goes_to_the_first_point_at_or_after_its_hash_wrapping() -> None:
    sel: Selector = ConsistentHashingSelector(replica_points=1)
    a, b = Consumer("a", 1), Consumer("b", 2)
    sel.add_consumer(a, "a")
    sel.add_consumer(b, "b")
    pa, pb = murmur3_32_masked(b"a0"), murmur3_32_masked(b"b0")
    (low, first), (high, _) = sorted([(pa, a), (pb, b)], key=lambda p: p[0])
    assert sel.select(low) is first
    assert sel.select(low + 1) is not first
    assert sel.select(high) is not first
    assert sel.select(high + 1) is first  # wraps
    assert sel.select(HASH_SPACE_MAX) is first
    assert sel.select(0) is first
    ranges = sel.consumer_key_hash_ranges()
    assert ranges[first] == [(0, low), (high + 1, HASH_SPACE_MAX)]


def test_same_key_same_consumer_while_membership_is_unchanged() -> None:
    sel, _ = _build(["alpha", "beta", "gamma"])
    again, _ = _build(["alpha", "beta", "gamma"])
    for i in range(500):
        h = sticky_key_hash(f"k{i}".encode())
        first = sel.select(h)
        assert first is not None
        assert sel.select(h) is first
        assert again.select(h).name == first.name  # type: ignore[union-attr]


def test_distribution_is_roughly_balanced() -> None:
    sel, consumers = _build(["consumer-a", "consumer-b", "consumer-c", "consumer-d"])
    counts = Counter(sel.select(sticky_key_hash(f"key-{i}".encode())) for i in range(10_000))
    assert set(counts) == set(consumers)
    for consumer in consumers:
        assert 1_000 <= counts[consumer] <= 4_500, counts


def test_ranges_cover_the_hash_space_exactly_once() -> None:
    sel, consumers = _build(["consumer-a", "consumer-b", "consumer-c", "consumer-d"])
    flat = _flat_ranges(sel)
    last_point = max(max(_points(c.name)) for c in consumers)
    assert len(flat) == 4 * 100 + (1 if last_point < HASH_SPACE_MAX else 0)
    expected_start = 0
    for start, end, consumer in flat:
        assert start == expected_start
        assert start <= end
        assert sel.select(start) is consumer
        assert sel.select(end) is consumer
        expected_start = end + 1
    assert expected_start == HASH_SPACE_MAX + 1
    assert list(sel.consumer_key_hash_ranges()) == consumers


@given(names=st.lists(NAMES, min_size=1, max_size=5, unique=True), new=NAMES, keys=KEYS)
def test_adding_a_consumer_only_moves_keys_to_it(
    names: list[str], new: str, keys: list[bytes]
) -> None:
    assume(new not in names and _no_shared_points([*names, new]))
    sel, _ = _build(names)
    hashes = [sticky_key_hash(k) for k in keys]
    before = [sel.select(h) for h in hashes]
    joined = Consumer(new, 99)
    sel.add_consumer(joined, new)
    for h, owner in zip(hashes, before, strict=True):
        assert sel.select(h) in (owner, joined)


@given(names=st.lists(NAMES, min_size=2, max_size=6, unique=True), data=st.data(), keys=KEYS)
def test_removing_a_consumer_only_moves_its_keys(
    names: list[str], data: st.DataObject, keys: list[bytes]
) -> None:
    assume(_no_shared_points(names))
    sel, consumers = _build(names)
    leaving = data.draw(st.sampled_from(consumers))
    hashes = [sticky_key_hash(k) for k in keys]
    before = [sel.select(h) for h in hashes]
    sel.remove_consumer(leaving)
    for h, owner in zip(hashes, before, strict=True):
        after = sel.select(h)
        assert after is not leaving
        if owner is not leaving:
            assert after is owner


def test_shared_point_picks_by_hash_among_sharers_sorted_by_name() -> None:
    # "b" + "10" and "b1" + "0" are the same point key, so both consumers share that point.
    sel: Selector = ConsistentHashingSelector(replica_points=11)
    b1 = Consumer("b1", 1)
    b = Consumer("b", 2)
    sel.add_consumer(b1, "b1")  # joins first, but sorts after "b"
    sel.add_consumer(b, "b")
    point = murmur3_32_masked(b"b10")
    expected = [b, b1][point % 2]
    assert sel.select(point) is expected
    assert sel.select(point + 2) is not None
    ranges = sel.consumer_key_hash_ranges()
    shared = [r for r in ranges[b] if r in ranges[b1]]
    assert len(shared) == 1 and shared[0][1] == point
    start = shared[0][0]
    for h in (start, start + 1, point - 1, point):
        assert sel.select(h) is [b, b1][h % 2]
    sel.remove_consumer(b)
    assert sel.select(point) is b1
    assert sel.consumers == [b1]


def test_two_consumers_with_the_same_name_share_every_point() -> None:
    sel: Selector = ConsistentHashingSelector()
    first, second = Consumer("same", 1), Consumer("same", 2)
    sel.add_consumer(first, "same")
    sel.add_consumer(second, "same")
    ranges = sel.consumer_key_hash_ranges()
    assert ranges[first] == ranges[second]  # listed under both, as Pulsar 2.x does
    counts = Counter(sel.select(sticky_key_hash(f"k{i}".encode())) for i in range(2000))
    assert set(counts) == {first, second}
    for h in (0, 1, 2, 3, 1001):
        assert sel.select(h) is (first, second)[h % 2]  # ties on name: join order
    sel.remove_consumer(first)
    assert all(sel.select(h) is second for h in (0, 1, 2, 3, 1001))
    sel.remove_consumer(first)  # unknown now: no-op
    assert sel.consumers == [second]


def test_duplicate_add_is_refused_and_changes_nothing() -> None:
    sel, (a, b) = _build(["a", "b"])
    before = sel.consumer_key_hash_ranges()
    with pytest.raises(ConsumerAssignError, match="already"):
        sel.add_consumer(a, "a")
    assert sel.consumer_key_hash_ranges() == before
    assert sel.consumers == [a, b]


def test_replica_points_must_be_positive() -> None:
    with pytest.raises(ValueError, match="replica_points"):
        ConsistentHashingSelector[Consumer](replica_points=0)
