"""Entries read without protobuf: whatever the scanner accepts it reads as the protobuf path
does (info, last chunk, payload size), and it accepts what clients usually send."""

from __future__ import annotations

import base64

from hypothesis import given
from hypothesis import strategies as st

from starquake.broker.entry_info import EntryInfo, EntryInfoCache, info_of
from starquake.broker.entry_scan import scan_entry, stored_entry_info
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.framing import encode_entry, parse_entry

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
I32 = st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1)
I64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)


def _by_protobuf(entry: bytes) -> tuple[EntryInfo, bool, int]:
    parsed = parse_entry(entry)
    metadata = parsed.metadata
    last_chunk = not metadata.HasField("chunk_id") or (
        metadata.chunk_id >= metadata.num_chunks_from_msg - 1
    )
    return info_of(metadata), last_chunk, len(parsed.payload)


@st.composite
def metadatas(draw: st.DrawFn) -> tuple[pb.MessageMetadata, bool]:
    """A MessageMetadata, and whether the scanner should read it (nothing it leaves out)."""
    m = pb.MessageMetadata(
        producer_name=draw(st.text(max_size=8)), sequence_id=draw(U64), publish_time=draw(U64)
    )
    readable = True
    for name, values in (
        ("num_messages_in_batch", I32),
        ("deliver_at_time", I64),
        ("chunk_id", I32),
        ("num_chunks_from_msg", st.one_of(I32, st.integers(0, 4))),
        ("uncompressed_size", st.integers(0, (1 << 32) - 1)),
        ("event_time", U64),
        ("highest_sequence_id", U64),
        ("compression", st.sampled_from([0, 1, 2])),
        ("ordering_key", st.binary(max_size=6)),
        ("partition_key", st.text(max_size=6)),
        ("uuid", st.text(max_size=6)),
        ("schema_version", st.binary(max_size=4)),
        ("null_value", st.booleans()),
    ):
        if draw(st.booleans()):
            setattr(m, name, draw(values))
    if m.HasField("partition_key") and draw(st.booleans()):
        m.partition_key = base64.b64encode(m.partition_key.encode()).decode()
        m.partition_key_b64_encoded = True
        readable = m.HasField("ordering_key")  # which comes first, else left to protobuf
    if draw(st.booleans()):
        m.properties.add(key="k", value=draw(st.text(max_size=4)))
        readable = False
    if draw(st.booleans()):
        m.replicate_to.append(draw(st.text(max_size=4)))
    return m, readable


@given(metadatas(), st.binary(max_size=20), st.booleans())
def test_scanned_entries_read_as_protobuf_reads_them(
    drawn: tuple[pb.MessageMetadata, bool], payload: bytes, checksum: bool
) -> None:
    metadata, readable = drawn
    entry = encode_entry(metadata, payload, checksum=checksum)
    scanned = scan_entry(entry)
    if readable:
        assert scanned is not None
    if scanned is not None:
        assert scanned == _by_protobuf(entry)


@given(metadatas(), st.binary(max_size=8), st.integers(0, 60), st.integers(0, 255))
def test_a_changed_byte_is_scanned_only_as_protobuf_reads_it(
    drawn: tuple[pb.MessageMetadata, bool], payload: bytes, index: int, value: int
) -> None:
    entry = bytearray(encode_entry(drawn[0], payload, checksum=False))
    entry[index % len(entry)] = value
    scanned = scan_entry(bytes(entry))
    if scanned is not None:
        assert scanned == _by_protobuf(bytes(entry))


def test_what_is_left_to_protobuf() -> None:
    plain = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    assert scan_entry(encode_entry(plain, b"x")) is not None
    good = encode_entry(plain, b"x")
    bad_crc = good[:2] + bytes([good[2] ^ 1]) + good[3:]
    no_time = pb.MessageMetadata(producer_name="p", sequence_id=1).SerializePartialToString()
    not_utf8 = plain.SerializeToString() + b"\x32\x02\xff\xfe"  # partition_key
    unknown = plain.SerializeToString() + b"\x50\x01"  # field 10
    cases = {
        "checksum": bad_crc,
        "required field": len(no_time).to_bytes(4, "big") + no_time,
        "broker entry metadata": b"\x0e\x02\x00\x00\x00\x00" + good,
        "not utf-8": len(not_utf8).to_bytes(4, "big") + not_utf8,
        "unknown field": len(unknown).to_bytes(4, "big") + unknown,
        "metadata past the end": (200).to_bytes(4, "big") + plain.SerializeToString(),
        "short": b"\x00\x00",
    }
    for what, entry in cases.items():
        assert scan_entry(entry) is None, what


@given(metadatas(), st.binary(max_size=20), st.booleans())
def test_a_stored_entry_reads_as_sent_without_its_checksum_checked_again(
    drawn: tuple[pb.MessageMetadata, bool], payload: bytes, checksum: bool
) -> None:
    """Entries read back from storage: the same info as the SEND's scan (their checksum was
    checked then), also when a stored checksum no longer matches."""
    entry = encode_entry(drawn[0], payload, checksum=checksum)
    scanned = scan_entry(entry)
    stored = stored_entry_info(entry)
    if scanned is not None:
        assert stored == scanned[0]
    if stored is not None:
        assert stored == _by_protobuf(entry)[0]
    if checksum:
        changed = entry[:2] + bytes([entry[2] ^ 1]) + entry[3:]
        assert scan_entry(changed) is None
        assert stored_entry_info(changed) == stored


@given(metadatas(), st.binary(max_size=20), st.booleans())
def test_the_info_cache_reads_stored_entries_by_scanner_as_by_protobuf(
    drawn: tuple[pb.MessageMetadata, bool], payload: bytes, checksum: bool
) -> None:
    """A topic's info cache reads a missed entry (bytes, or a view into a read buffer) with
    the scanner where it can: the same info as protobuf gives."""
    entry = encode_entry(drawn[0], payload, checksum=checksum)
    want = _by_protobuf(entry)[0]
    for data in (entry, memoryview(b"xx" + entry)[2:]):
        infos = EntryInfoCache(scanner=stored_entry_info)
        assert infos.get((1, 0), data) == want
