from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starquake.common.hashes import (
    boost_hash,
    java_string_hash,
    java_string_hash_cpp,
    murmur3_32,
    murmur3_32_masked,
)

# Per key: murmur3_32 raw, masked to 31 bits, sticky-key slot (Pulsar 4.0, out of 65536),
# JavaStringHash, BoostHash (official C++ client); None where no reference value is known.
VECTORS: list[tuple[str, int | None, int | None, int | None, int | None, int]] = [
    ("", 0x00000000, 0, 1, 0, 2133126054),
    ("a", 0x3C2569B2, 1009084850, 27058, 97, 2135870748),
    ("k1", 0xFDC6602A, 2110152746, 24618, 3366, 1072173493),
    ("k2", 0xD8367FC8, 1479966664, None, None, 1373383201),
    ("key1", 0x9B970125, 462881061, 293, 3288498, 2071103098),
    ("key2", 0x737139B4, 1936800180, None, None, 78330853),
    ("key01", 0x825DBA24, 39696932, None, None, 2101636627),
    ("key02", 0x2CCEF98B, 751761803, None, None, 95556565),
    ("hello", 0x248BFA47, 613153351, 64071, 99162322, 1742291129),
    ("NONE_KEY", 0x9E15BEA3, 504741539, 48803, 45784248, 1240969584),
    ("keykeykeykeykey1", 0x8127436E, 19350382, 17262, 434058482, 504830233),
    ("keykeykey2", None, None, None, 42978643, 49504370),
    ("日本", 0xC4D9F942, 1155135810, 63810, 835047, 522985414),
]

# Observed: the official Python client (pulsar-client 3.13.0) on a 7-partition topic.
OBSERVED_PARTITIONS_OF_7 = {
    "k1": 6,
    "k2": 1,
    "key1": 1,
    "key2": 6,
    "key01": 6,
    "key02": 6,
    "keykeykeykeykey1": 5,
    "keykeykey2": 6,
    "a": 4,
    "hello": 5,
    "user-42": 0,
    "ключ": 4,
    "日本": 0,
}


def sticky_slot(key: str) -> int:
    slot = murmur3_32_masked(key.encode()) % 65536
    return slot or 1


@pytest.mark.parametrize(("key", "raw", "masked", "slot", "java", "boost"), VECTORS)
def test_vectors(
    key: str,
    raw: int | None,
    masked: int | None,
    slot: int | None,
    java: int | None,
    boost: int,
) -> None:
    data = key.encode()
    if raw is not None:
        assert murmur3_32(data) == raw
    if masked is not None:
        assert murmur3_32_masked(data) == masked
    if slot is not None:
        assert sticky_slot(key) == slot
    if java is not None:
        assert java_string_hash(key) == java
    assert boost_hash(key) == boost


def test_java_string_hash_cpp_differs_for_non_ascii() -> None:
    assert java_string_hash("日本") == 835047
    assert java_string_hash_cpp("日本") == 1303416866


def test_java_string_hash_counts_utf16_code_units() -> None:
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16.
    assert java_string_hash("\U0001f600") == 31 * 0xD83D + 0xDE00


@pytest.mark.parametrize(("key", "partition"), sorted(OBSERVED_PARTITIONS_OF_7.items()))
def test_observed_python_client_routing(key: str, partition: int) -> None:
    assert boost_hash(key) % 7 == partition


def _java_reference(units: list[int]) -> int:
    h = 0
    for u in units:
        h = (31 * h + u) % 2**32
        if h >= 2**31:
            h -= 2**32  # Java int overflow
    return h & 0x7FFFFFFF


@given(st.text())
def test_java_string_hash_matches_reference(key: str) -> None:
    raw = key.encode("utf-16-be", "surrogatepass")
    units = [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]
    assert java_string_hash(key) == _java_reference(units)


@given(st.text(alphabet=st.characters(max_codepoint=0x7F)))
def test_java_hash_variants_agree_on_ascii(key: str) -> None:
    assert java_string_hash_cpp(key) == java_string_hash(key)


@given(st.text())
def test_java_string_hash_cpp_matches_signed_char_reference(key: str) -> None:
    signed = [b - 256 if b >= 128 else b for b in key.encode("utf-8", "surrogatepass")]
    assert java_string_hash_cpp(key) == _java_reference(signed)


@given(st.text())
def test_routing_hashes_are_non_negative_31_bit(key: str) -> None:
    for value in (
        boost_hash(key),
        java_string_hash(key),
        java_string_hash_cpp(key),
        murmur3_32_masked(key.encode("utf-8", "surrogatepass")),
    ):
        assert 0 <= value <= 0x7FFFFFFF
