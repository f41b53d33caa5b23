"""Cross-check murmur3 against the mmh3 C extension (skipped when it is not installed)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starquake.common.hashes import murmur3_32, murmur3_32_masked

mmh3 = pytest.importorskip("mmh3")


@given(st.binary(max_size=300), st.integers(min_value=0, max_value=0xFFFFFFFF))
def test_murmur3_matches_mmh3(data: bytes, seed: int) -> None:
    assert murmur3_32(data, seed) == mmh3.hash(data, seed, signed=False)


@given(st.binary(max_size=64))
def test_masked_matches_mmh3(data: bytes) -> None:
    assert murmur3_32_masked(data) == mmh3.hash(data, 0, signed=False) & 0x7FFFFFFF


@pytest.mark.parametrize("length", range(0, 40))
def test_every_block_and_tail_length(length: int) -> None:
    data = bytes(range(200, 200 - length, -1))
    assert murmur3_32(data, 0x9747B28C) == mmh3.hash(data, 0x9747B28C, signed=False)
