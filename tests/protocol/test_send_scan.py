"""SENDs read without protobuf: every SEND the scanner accepts reads as protobuf reads it, and
the plain ones (what clients send) are accepted."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.framing import Frame, FrameDecoder, encode_command, encode_payload_command
from starquake.protocol.send_scan import SendFields, scan_send, send_fields_of

T = pb.BaseCommand
U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)


def _fields(send: SendFields) -> tuple[object, ...]:
    return (
        send.producer_id,
        send.sequence_id,
        send.has_highest,
        send.highest_sequence_id,
        send.has_txn,
        send.txnid_most_bits,
        send.txnid_least_bits,
        send.is_chunk,
        send.entry,
    )


def _scan(body: bytes, entry: bytes | None = b"e") -> SendFields | None:
    return scan_send(body, 0, len(body), entry)


def _as_protobuf(body: bytes, entry: bytes | None = b"e") -> SendFields:
    return send_fields_of(T.FromString(body).send, entry)


@st.composite
def sends(draw: st.DrawFn) -> pb.CommandSend:
    send = pb.CommandSend(producer_id=draw(U64), sequence_id=draw(U64))
    for name in ("txnid_least_bits", "txnid_most_bits", "highest_sequence_id"):
        if draw(st.booleans()):
            setattr(send, name, draw(U64))
    if draw(st.booleans()):
        send.num_messages = draw(st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1))
    if draw(st.booleans()):
        send.is_chunk = draw(st.booleans())
    if draw(st.booleans()):
        send.marker = draw(st.booleans())
    return send


@given(sends())
def test_plain_sends_are_scanned_as_protobuf_reads_them(send: pb.CommandSend) -> None:
    body = T(type=T.SEND, send=send).SerializeToString()
    scanned = _scan(body)
    assert scanned is not None
    assert _fields(scanned) == _fields(_as_protobuf(body))
    assert scanned.message() == send
    assert scanned.base_command() == T(type=T.SEND, send=send)


@given(sends(), st.binary(max_size=12))
def test_whatever_is_scanned_reads_as_protobuf_reads_it(send: pb.CommandSend, tail: bytes) -> None:
    """Appended bytes (fields, garbage) either leave the SEND to protobuf or read the same."""
    body = T(type=T.SEND, send=send).SerializeToString()
    inner = send.SerializeToString() + tail
    body = bytes([0x08, 0x06, 0x32, len(inner)]) + inner if len(inner) < 128 else body
    scanned = _scan(body)
    if scanned is not None:
        assert _fields(scanned) == _fields(_as_protobuf(body))


@given(st.binary(max_size=40))
def test_random_bytes_scanned_only_when_protobuf_reads_the_same(body: bytes) -> None:
    scanned = _scan(b"\x08\x06\x32" + bytes([len(body)]) + body if len(body) < 128 else body)
    if scanned is not None:
        decoded = T.FromString(b"\x08\x06\x32" + bytes([len(body)]) + body)
        assert decoded.send.IsInitialized()
        assert _fields(scanned) == _fields(send_fields_of(decoded.send, b"e"))


def test_last_occurrence_wins() -> None:
    inner = bytes([0x08, 1, 0x10, 2, 0x08, 3, 0x30, 9, 0x30, 7])
    scanned = _scan(bytes([0x08, 0x06, 0x32, len(inner)]) + inner)
    assert scanned is not None
    assert (scanned.producer_id, scanned.sequence_id, scanned.highest_sequence_id) == (3, 2, 7)


def test_what_is_left_to_protobuf() -> None:
    plain = pb.CommandSend(producer_id=1, sequence_id=2)
    with_id = pb.CommandSend(producer_id=1, sequence_id=2)
    with_id.message_id.ledgerId = 5
    with_id.message_id.entryId = 6
    cases = {
        "message_id": T(type=T.SEND, send=with_id).SerializeToString(),
        "no sequence_id": bytes([0x08, 0x06, 0x32, 2, 0x08, 1]),
        "no producer_id": bytes([0x08, 0x06, 0x32, 2, 0x10, 1]),
        "unknown field": bytes([0x08, 0x06, 0x32, 6, 0x08, 1, 0x10, 2, 0x68, 1]),
        "wire type": bytes([0x08, 0x06, 0x32, 6, 0x08, 1, 0x10, 2, 0x31, 1]),
        "another type": T(type=T.PING, ping=pb.CommandPing()).SerializeToString(),
        "trailing field": T(type=T.SEND, send=plain).SerializeToString() + b"\x10\x00",
        "short length": bytes([0x08, 0x06, 0x32, 3, 0x08, 1, 0x10, 2]),
        "over 64 bits": bytes([0x08, 0x06, 0x32, 13, 0x08, 1, 0x10]) + b"\xff" * 9 + b"\x02",
    }
    for what, body in cases.items():
        assert _scan(body) is None, what


def test_the_decoder_gives_plain_sends_as_fields_in_order() -> None:
    entry = b"\x00\x00\x00\x00payload"
    send = T(type=T.SEND, send=pb.CommandSend(producer_id=4, sequence_id=9))
    odd = pb.CommandSend(producer_id=4, sequence_id=10)
    odd.message_id.ledgerId = 1
    odd.message_id.entryId = 1
    data = (
        encode_command(T(type=T.PING, ping=pb.CommandPing()))
        + encode_payload_command(send, entry)
        + encode_payload_command(T(type=T.SEND, send=odd), entry)
    )
    decoder = FrameDecoder()
    frames = decoder.feed_sends(data[:10]) + decoder.feed_sends(data[10:])
    assert [type(f) for f in frames] == [Frame, SendFields, Frame]
    scanned = frames[1]
    assert isinstance(scanned, SendFields)
    assert (scanned.producer_id, scanned.sequence_id, scanned.entry) == (4, 9, entry)
    # the protobuf decoder still gives frames only
    assert [type(f) for f in FrameDecoder().feed(data)] == [Frame, Frame, Frame]
