from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from starquake.protocol.checksum import crc32c


def test_check_values() -> None:
    assert crc32c(b"") == 0
    assert crc32c(b"123456789") == 0xE3069283


def test_protocol_md_send_frame_checksum() -> None:
    # The CRC32C checksum of a SEND frame covers metadataSize + metadata + payload.
    covered = bytes.fromhex("0000000c0a0170100018 80d095ffbc31 6869".replace(" ", ""))
    assert crc32c(covered) == 0x5B4C69AC


def test_accepts_memoryview_and_bytearray() -> None:
    data = b"xx123456789yy"
    assert crc32c(memoryview(data)[2:-2]) == 0xE3069283
    assert crc32c(bytearray(b"123456789")) == 0xE3069283


@given(st.binary(), st.binary())
def test_incremental(a: bytes, b: bytes) -> None:
    assert crc32c(b, crc32c(a)) == crc32c(a + b)


def _reference_crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


@given(st.binary(max_size=200))
def test_matches_bitwise_reference(data: bytes) -> None:
    assert crc32c(data) == _reference_crc32c(data)
