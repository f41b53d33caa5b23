"""A command whose ``type`` is unknown or missing is invalid: never handled as CONNECT.

proto2 parsing keeps an enum value it does not know as an unknown field and leaves ``type``
unset, and an unset ``type`` reads as the enum's first value, CONNECT.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.errors import MalformedFrameError
from starquake.protocol.framing import FrameDecoder, encode_raw_command

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
