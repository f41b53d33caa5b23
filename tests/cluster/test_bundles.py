"""Namespace bundles: Pulsar's boundaries, hashing and splits, and the invariants that make
ownership by bundle sound (every hash value in exactly one bundle, before and after splits)."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starquake.cluster.bundles import FULL_UPPER, MAX_BUNDLES, NamespaceBundles, topic_hash


def test_four_default_bundles_are_named_as_pulsar_names_them() -> None:
    bundles = NamespaceBundles.equal(4)
    assert [b.name for b in bundles.bundles] == [
        "0x00000000_0x40000000",
        "0x40000000_0x80000000",
        "0x80000000_0xc0000000",
        "0xc0000000_0xffffffff",
    ]
    assert bundles.to_policies() == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
        "numBundles": 4,
    }


def test_an_uneven_count_leaves_the_remainder_to_the_last_range() -> None:
    # 2^32 / 3 = 0x55555555 rest 1
    assert NamespaceBundles.equal(3).to_policies()["boundaries"] == [
        "0x00000000",
        "0x55555555",
        "0xaaaaaaaa",
        "0xffffffff",
    ]


def test_a_topic_is_placed_by_the_crc32_of_its_full_name() -> None:
    # Guava's crc32(), which Pulsar hashes with, is the IEEE CRC-32 (check value of
    # "123456789": 0xcbf43926; CRC-32C, the wire checksum, would give 0xe3069283)
    assert topic_hash("123456789") == 0xCBF43926
    name = "persistent://public/default/orders-partition-3"
    assert topic_hash(name) == zlib.crc32(name.encode())
    value = topic_hash(name)
    bundle = NamespaceBundles.equal(4).find(name)
    assert bundle.lower <= value < bundle.upper or value == bundle.upper == FULL_UPPER


def test_partitions_of_one_topic_spread_over_bundles() -> None:
    bundles = NamespaceBundles.equal(4)
    names = {
        bundles.find(f"persistent://public/default/orders-partition-{i}").name for i in range(16)
    }
    assert len(names) > 1


@pytest.mark.parametrize(
    "bad",
    [[0], [1, FULL_UPPER], [0, 0x10, 0x10, FULL_UPPER], [0, 0x20, 0x10, FULL_UPPER], [0, 5]],
)
def test_malformed_boundaries_are_refused(bad: list[int]) -> None:
    with pytest.raises(ValueError, match="boundaries"):
        NamespaceBundles(bad)


def test_policies_round_trip_and_bad_hex_is_refused() -> None:
    bundles = NamespaceBundles.equal(8)
    assert NamespaceBundles.from_policies(bundles.to_policies()).to_policies() == (
        bundles.to_policies()
    )
    with pytest.raises(ValueError, match="boundaries"):
        NamespaceBundles.from_policies({"boundaries": ["0x0", "zz"]})
    with pytest.raises(ValueError, match="boundaries"):
        NamespaceBundles.from_policies({"boundaries": "0x0"})


_splits = st.lists(st.integers(min_value=0, max_value=63), max_size=12)


@given(
    count=st.integers(min_value=1, max_value=64), splits=_splits, value=st.integers(0, FULL_UPPER)
)
def test_every_hash_value_is_in_exactly_one_bundle(
    count: int, splits: list[int], value: int
) -> None:
    bundles = NamespaceBundles.equal(count)
    for pick in splits:
        current = bundles.bundles
        bundles = bundles.split(current[pick % len(current)].name)
    holders = [b for b in bundles.bundles if b.holds(value)]
    assert len(holders) == 1
    assert len(bundles.bundles) == count + len(splits)


@given(topic=st.text(min_size=1, max_size=60), count=st.integers(min_value=1, max_value=64))
def test_find_agrees_with_the_ranges(topic: str, count: int) -> None:
    bundles = NamespaceBundles.equal(count)
    found = bundles.find(topic)
    assert found.holds(topic_hash(topic))
    assert found in bundles.bundles


def test_a_split_halves_the_range_and_keeps_the_others() -> None:
    bundles = NamespaceBundles.equal(4).split("0x40000000_0x80000000")
    assert [b.name for b in bundles.bundles][1:3] == [
        "0x40000000_0x60000000",
        "0x60000000_0x80000000",
    ]
    with pytest.raises(ValueError, match="no bundle"):
        bundles.split("0x40000000_0x80000000")
    tiny = NamespaceBundles([0, 1, FULL_UPPER])
    with pytest.raises(ValueError, match="too small"):
        tiny.split("0x00000000_0x00000001")


def test_a_namespace_has_at_most_max_bundles() -> None:
    """An equal split, stored boundaries or a split past the bound is refused (a namespace
    asking for 2^32 bundles would otherwise hold billions of boundaries in memory)."""
    full = NamespaceBundles.equal(MAX_BUNDLES)
    for make in (
        lambda: NamespaceBundles.equal(MAX_BUNDLES + 1),
        lambda: NamespaceBundles.equal(1 << 32),
        lambda: full.split(full.bundles[0].name),
        lambda: NamespaceBundles([*range(MAX_BUNDLES + 1), FULL_UPPER]),
    ):
        with pytest.raises(ValueError, match=f"{MAX_BUNDLES}"):
            make()
