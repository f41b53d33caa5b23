"""A command whose ``type`` is unknown or missing is invalid: never handled as CONNECT.

proto2 parsing keeps an enum value it does not know as an unknown field and leaves ``type``
unset, and an unset ``type`` reads as the enum's first value, CONNECT.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.checksum import crc32c
from starquake.protocol.errors import MalformedFrameError
from starquake.protocol.framing import (
    FrameDecoder,
    encode_command,
    encode_raw_command,
    parse_entry,
)

T = pb.BaseCommand


def _connect_body() -> bytes:
    cmd = T(type=T.CONNECT)
    cmd.connect.client_version = "fuzz"
    cmd.connect.protocol_version = 20
    return cmd.SerializeToString()


def _with_type_varint(body: bytes, type_value: int) -> bytes:
    """``body`` (a serialized CONNECT, whose first field is ``type``) with another type number."""
    assert body[:2] == bytes([0x08, T.CONNECT])
    return bytes([0x08, type_value]) + body[2:]


UNKNOWN_TYPE = _with_type_varint(_connect_body(), 99)
MISSING_TYPE = _connect_body()[2:]


@pytest.mark.parametrize(
    "body", [UNKNOWN_TYPE, MISSING_TYPE, b""], ids=["unknown", "missing", "empty"]
)
def test_decoder_rejects_command_without_known_type(body: bytes) -> None:
    with pytest.raises(MalformedFrameError):
        FrameDecoder().feed(encode_raw_command(body))


def test_decoder_accepts_known_type() -> None:
    (frame,) = FrameDecoder().feed(encode_raw_command(_connect_body()))
    assert frame.command.type == T.CONNECT


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data: Path = tmp_path_factory.mktemp("cmd-type") / "data"
    with EmbeddedBroker(data) as running:
        yield running


def _reply_or_close(port: int, data: bytes) -> list[int] | None:
    """Send ``data`` then a valid CONNECT; the command types received, or None if closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        sock.sendall(commands.connect("after", protocol_version=20))
        decoder = FrameDecoder()
        types: list[int] = []
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    return None
                types.extend(f.command.type for f in decoder.feed(chunk))
                if types:
                    return types
        except ConnectionResetError:
            return None


@pytest.mark.parametrize(
    "body", [UNKNOWN_TYPE, MISSING_TYPE, b""], ids=["unknown", "missing", "empty"]
)
def test_broker_closes_on_unknown_type_instead_of_connecting(
    broker: EmbeddedBroker, body: bytes
) -> None:
    assert _reply_or_close(broker.broker_port, encode_raw_command(body)) is None


@pytest.mark.parametrize("body", [UNKNOWN_TYPE, MISSING_TYPE], ids=["unknown", "missing"])
def test_unknown_type_after_connect_closes(broker: EmbeddedBroker, body: bytes) -> None:
    with socket.create_connection(("127.0.0.1", broker.broker_port), timeout=5) as sock:
        sock.sendall(commands.connect("first", protocol_version=20))
        decoder = FrameDecoder()
        frames = decoder.feed(sock.recv(65536))
        assert [f.command.type for f in frames] == [T.CONNECTED]
        sock.sendall(encode_raw_command(body) + commands.ping())
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        assert [f.command.type for f in FrameDecoder().feed(received)] == []


def test_sane_connect_still_works(broker: EmbeddedBroker) -> None:
    assert _reply_or_close(broker.broker_port, b"") == [T.CONNECTED]


def _after_handshake(port: int, data: bytes) -> tuple[bool, list[pb.BaseCommand]]:
    """Send ``data`` then a PING on a connected socket: (closed by the broker, replies)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(commands.connect("raw", protocol_version=20))
        decoder = FrameDecoder()
        replies: list[pb.BaseCommand] = []
        sock.sendall(data + commands.ping())
        while not any(c.type == T.PONG for c in replies):
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return True, replies[1:]
            replies.extend(f.command for f in decoder.feed(chunk))
        assert replies[0].type == T.CONNECTED
        return False, replies[1:-1]


def test_type_without_its_subcommand_closes(broker: EmbeddedBroker) -> None:
    closed, replies = _after_handshake(broker.broker_port, encode_command(T(type=T.PRODUCER)))
    assert closed
    assert replies == []


def test_subcommand_missing_required_fields_closes(broker: EmbeddedBroker) -> None:
    cmd = T(type=T.SUBSCRIBE)
    cmd.subscribe.consumer_id = 1
    cmd.subscribe.request_id = 1
    body = cmd.SerializePartialToString()
    closed, replies = _after_handshake(broker.broker_port, encode_raw_command(body))
    assert closed
    assert replies == []


def test_unsupported_command_without_request_id_closes(broker: EmbeddedBroker) -> None:
    closed, _ = _after_handshake(broker.broker_port, encode_command(T(type=T.NEW_TXN)))
    assert closed


def test_unsupported_command_with_request_id_gets_error(broker: EmbeddedBroker) -> None:
    cmd = T(type=T.SUCCESS)
    cmd.success.request_id = 9
    closed, replies = _after_handshake(broker.broker_port, encode_command(cmd))
    assert not closed
    assert [(r.type, r.error.request_id) for r in replies] == [(T.ERROR, 9)]


def _incomplete_entry(sequence_id: int, payload: bytes) -> bytes:
    """An entry, with a correct checksum, whose metadata has no producer name or publish time."""
    meta = pb.MessageMetadata(sequence_id=sequence_id).SerializePartialToString()
    body = struct.pack(">I", len(meta)) + meta + payload
    return struct.pack(">HI", 0x0E01, crc32c(body)) + body


def test_send_with_incomplete_metadata_is_refused(broker: EmbeddedBroker) -> None:
    producer = T(type=T.PRODUCER)
    producer.producer.topic = "persistent://public/default/incomplete-metadata"
    producer.producer.producer_id = 1
    producer.producer.request_id = 1
    entry = _incomplete_entry(0, b"payload")
    with socket.create_connection(("127.0.0.1", broker.broker_port), timeout=5) as sock:
        sock.sendall(commands.connect("raw", protocol_version=20) + encode_command(producer))
        decoder = FrameDecoder()
        replies: list[pb.BaseCommand] = []
        while len(replies) < 2:
            replies.extend(f.command for f in decoder.feed(sock.recv(65536)))
        assert [r.type for r in replies] == [T.CONNECTED, T.PRODUCER_SUCCESS]
        sock.sendall(commands.send_frame_header(1, 0, len(entry)) + entry + commands.ping())
        while len(replies) < 4:
            replies.extend(f.command for f in decoder.feed(sock.recv(65536)))
    assert [r.type for r in replies[2:]] == [T.SEND_ERROR, T.PONG]
    assert "required" in replies[2].send_error.message


def test_parse_entry_requires_metadata_fields_only_when_verifying() -> None:
    entry = _incomplete_entry(3, b"x")
    with pytest.raises(MalformedFrameError):
        parse_entry(entry)
    assert parse_entry(entry, verify_checksum=False).metadata.sequence_id == 3
    assert parse_entry(entry, require_fields=False).metadata.sequence_id == 3
