"""Cross-check the pure-Python murmur3 (the fallback) against the mmh3 C extension (the fast
path the broker runs), and the public functions against both."""

from __future__ import annotations

import mmh3
import pytest
from hypothesis import given
from hypothesis import strategies as st

from starquake.common import hashes
from starquake.common.hashes import murmur3_32, murmur3_32_masked, murmur3_32_pure


@given(st.binary(max_size=300), st.integers(min_value=0, max_value=0xFFFFFFFF))
def test_murmur3_matches_mmh3(data: bytes, seed: int) -> None:
    assert murmur3_32_pure(data, seed) == mmh3.hash(data, seed, signed=False)
    assert murmur3_32(data, seed) == murmur3_32_pure(data, seed)


@given(st.binary(max_size=64))
def test_masked_matches_mmh3(data: bytes) -> None:
    assert murmur3_32_masked(data) == mmh3.hash(data, 0, signed=False) & 0x7FFFFFFF
    assert hashes._murmur3_32_masked_pure(data) == murmur3_32_masked(data)


@pytest.mark.parametrize("length", range(0, 40))
def test_every_block_and_tail_length(length: int) -> None:
    data = bytes(range(200, 200 - length, -1))
    assert murmur3_32_pure(data, 0x9747B28C) == mmh3.hash(data, 0x9747B28C, signed=False)


def test_the_fast_path_is_mmh3() -> None:
    """mmh3 is a dependency: the broker's hot path must not fall back to Python."""
    assert murmur3_32 is hashes._murmur3_32_mmh3
