"""Framing: published test vectors, incremental decoding, hand-encoded hot-path commands."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.errors import (
    ChecksumMismatchError,
    FrameTooLargeError,
    MalformedFrameError,
)
from starquake.protocol.framing import (
    FrameDecoder,
    encode_command,
    encode_entry,
    encode_payload_command,
    entry_num_messages,
    parse_entry,
)

T = pb.BaseCommand

PING = bytes.fromhex("00000009000000050812920100")
PONG = bytes.fromhex("000000090000000508139a0100")
CONNECT = bytes.fromhex(
    "00000029000000250802122 10a1150756c7361722d4350502d76342e322e30"
    "20142a046e6f6e655204080110 01".replace(" ", "")
)
SEND = bytes.fromhex(
    "0000002400000008080632040800100 00e015b4c69ac0000000c0a0170100018 80d095ffbc316869".replace(
        " ", ""
    )
)


def test_ping_pong_vectors() -> None:
    assert commands.ping() == PING
    assert commands.pong() == PONG


def test_connect_vector_decodes() -> None:
    (frame,) = FrameDecoder().feed(CONNECT)
    assert frame.command.type == T.CONNECT
    c = frame.command.connect
    assert c.client_version == "Pulsar-CPP-v4.2.0"
    assert c.protocol_version == 20
    assert c.auth_method_name == "none"
    assert c.feature_flags.supports_auth_refresh
    assert c.feature_flags.supports_broker_entry_metadata
    assert encode_command(frame.command) == CONNECT


def test_send_vector_round_trip() -> None:
    (frame,) = FrameDecoder().feed(SEND)
    assert frame.command.type == T.SEND
    assert frame.entry is not None
    parsed = parse_entry(frame.entry)
    assert parsed.checksum == 0x5B4C69AC
    assert parsed.metadata.producer_name == "p"
    assert parsed.metadata.publish_time == 1700000000000
    assert bytes(parsed.payload) == b"hi"
    meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1700000000000)
    cmd = T(type=T.SEND)
    cmd.send.producer_id = 0
    cmd.send.sequence_id = 0
    assert encode_payload_command(cmd, encode_entry(meta, b"hi")) == SEND


def test_checksum_mismatch_detected() -> None:
    (frame,) = FrameDecoder().feed(SEND)
    assert frame.entry is not None
    damaged = bytearray(frame.entry)
    damaged[-1] ^= 0xFF
    with pytest.raises(ChecksumMismatchError):
        parse_entry(bytes(damaged))


def test_entry_without_checksum_is_accepted() -> None:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=3, publish_time=1)
    parsed = parse_entry(encode_entry(meta, b"xyz", checksum=False))
    assert parsed.checksum is None
    assert bytes(parsed.payload) == b"xyz"


def test_num_messages_follows_field_presence() -> None:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    assert entry_num_messages(encode_entry(meta, b"")) == 1
    meta.num_messages_in_batch = 7
    assert entry_num_messages(encode_entry(meta, b"")) == 7


def test_frame_too_large_rejected_before_buffering() -> None:
    decoder = FrameDecoder(max_frame_size=1000)
    with pytest.raises(FrameTooLargeError):
        decoder.feed((5000).to_bytes(4, "big") + b"\x00\x00")


def test_malformed_command_rejected() -> None:
    with pytest.raises(MalformedFrameError):
        FrameDecoder().feed(b"\x00\x00\x00\x06\x00\x00\x00\x02\xff\xff")
    with pytest.raises(MalformedFrameError):
        FrameDecoder().feed(b"\x00\x00\x00\x04\x00\x00\x00\x09")


@given(st.lists(st.integers(min_value=1, max_value=17), min_size=1, max_size=40))
def test_decoder_handles_any_chunking(cuts: list[int]) -> None:
    stream = PING + SEND + CONNECT + PONG + SEND
    decoder = FrameDecoder()
    frames = []
    pos = 0
    for size in cuts * 20:
        if pos >= len(stream):
            break
        frames.extend(decoder.feed(stream[pos : pos + size]))
        pos += size
    frames.extend(decoder.feed(stream[pos:]))
    assert [f.command.type for f in frames] == [T.PING, T.SEND, T.CONNECT, T.PONG, T.SEND]
    assert decoder.buffered == 0


@given(
    consumer_id=st.integers(0, 2**64 - 1),
    ledger=st.integers(0, 2**63 - 1),
    entry=st.integers(0, 2**63 - 1),
    redelivery=st.integers(0, 2**32 - 1),
    partition=st.integers(-1, 2**31 - 1),
    ack_set=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
)
def test_hand_encoded_message_matches_protobuf(
    consumer_id: int,
    ledger: int,
    entry: int,
    redelivery: int,
    partition: int,
    ack_set: list[int],
) -> None:
    ours = commands.message_command_body(consumer_id, ledger, entry, redelivery, partition, ack_set)
    cmd = T.FromString(ours)
    assert cmd.type == T.MESSAGE
    m = cmd.message
    assert (m.consumer_id, m.message_id.ledgerId, m.message_id.entryId) == (
        consumer_id,
        ledger,
        entry,
    )
    assert m.redelivery_count == redelivery
    assert m.message_id.partition == partition
    assert list(m.ack_set) == ack_set
    expected = T(type=T.MESSAGE)
    expected.message.consumer_id = consumer_id
    expected.message.message_id.ledgerId = ledger
    expected.message.message_id.entryId = entry
    if partition >= 0:
        expected.message.message_id.partition = partition
    if redelivery:
        expected.message.redelivery_count = redelivery
    expected.message.ack_set.extend(ack_set)
    assert ours == expected.SerializeToString()


_receipt_ids = st.one_of(st.just(-1), st.integers(0, 2**63 - 1))


@given(
    producer_id=st.integers(0, 2**64 - 1),
    receipts=st.lists(
        st.tuples(
            st.integers(0, 2**64 - 1),  # sequence id
            _receipt_ids,  # ledger (-1: a duplicate's receipt)
            _receipt_ids,  # entry
            st.one_of(st.just(-1), st.integers(0, 2**64 - 1)),  # highest (-1: none declared)
        ),
        min_size=1,
        max_size=4,
    ),
    partition=st.one_of(st.just(-1), st.integers(0, 2**31 - 1)),
)
def test_hand_encoded_send_receipts_match_protobuf(
    producer_id: int, receipts: list[tuple[int, int, int, int]], partition: int
) -> None:
    """Receipts joined back to back (as one producer's run of a commit is sent) are the frames
    protobuf encodes, -1 written as 2**64-1 as Java does."""
    parts: list[bytes] = []
    head = commands.receipt_producer_head(producer_id)
    tail = commands.receipt_partition_tail(partition)
    expected_frames = []
    for sequence_id, ledger, entry, highest in receipts:
        commands.add_send_receipt(parts, head, sequence_id, ledger, entry, highest, tail)
        expected = T(type=T.SEND_RECEIPT)
        r = expected.send_receipt
        r.producer_id = producer_id
        r.sequence_id = sequence_id
        r.message_id.ledgerId = ledger & (2**64 - 1)
        r.message_id.entryId = entry & (2**64 - 1)
        if partition >= 0:
            r.message_id.partition = partition
        r.highest_sequence_id = highest & (2**64 - 1)
        expected_frames.append(encode_command(expected))
    assert b"".join(parts) == b"".join(expected_frames)
    sequence_id, ledger, entry, highest = receipts[0]
    assert (
        commands.send_receipt(producer_id, sequence_id, ledger, entry, highest, partition)
        == expected_frames[0]
    )
