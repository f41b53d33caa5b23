"""Hypothesis strategies for Pulsar wire frames, and a raw socket that reports what came back."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from hypothesis import strategies as st

from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.checksum import crc32c
from starquake.protocol.framing import FrameDecoder, encode_entry, encode_raw_command

T = pb.BaseCommand
FD = FieldDescriptor

FUZZ_TOPICS = [f"persistent://public/default/fuzz-{n}" for n in range(3)] + [
    "non-persistent://public/default/fuzz-np",
    "persistent://public/default/fuzz-partitioned-partition-0",
]
SUBSCRIPTIONS = ["s0", "s1"]
SUBCOMMAND_FIELD = {
    f.number: f.name for f in T.DESCRIPTOR.fields if f.message_type and f.number in T.Type.values()
}
ALL_TYPES = sorted(T.Type.values())
CLIENT_TYPES = [
    T.CONNECT,
    T.PING,
    T.PONG,
    T.PARTITIONED_METADATA,
    T.LOOKUP,
    T.PRODUCER,
    T.SEND,
    T.CLOSE_PRODUCER,
    T.SUBSCRIBE,
    T.FLOW,
    T.ACK,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES,
    T.UNSUBSCRIBE,
    T.CLOSE_CONSUMER,
    T.SEEK,
    T.GET_LAST_MESSAGE_ID,
    T.GET_TOPICS_OF_NAMESPACE,
    T.CONSUMER_STATS,
    T.GET_SCHEMA,
    T.GET_OR_CREATE_SCHEMA,
]
SMALL_IDS = st.integers(0, 3)

_INT_RANGES = {
    FD.TYPE_INT32: (-(2**31), 2**31 - 1),
    FD.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FD.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FD.TYPE_UINT32: (0, 2**32 - 1),
    FD.TYPE_FIXED32: (0, 2**32 - 1),
    FD.TYPE_INT64: (-(2**63), 2**63 - 1),
    FD.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FD.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FD.TYPE_UINT64: (0, 2**64 - 1),
    FD.TYPE_FIXED64: (0, 2**64 - 1),
}


def _string_for(name: str) -> st.SearchStrategy[str]:
    if name in ("topic", "original_principal", "topics_pattern"):
        return st.one_of(st.sampled_from(FUZZ_TOPICS), st.text(max_size=40))
    if name == "subscription":
        return st.one_of(st.sampled_from(SUBSCRIPTIONS), st.text(max_size=20))
    if name == "namespace":
        return st.one_of(st.just("public/default"), st.text(max_size=20))
    return st.text(max_size=16)


def _scalar(fd: FieldDescriptor) -> st.SearchStrategy[Any]:
    if fd.type in _INT_RANGES:
        low, high = _INT_RANGES[fd.type]
        return st.one_of(st.integers(max(low, 0), 3), st.integers(low, high))
    if fd.type == FD.TYPE_BOOL:
        return st.booleans()
    if fd.type in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT):
        return st.floats(allow_nan=False, width=32)
    if fd.type == FD.TYPE_STRING:
        return _string_for(fd.name)
    if fd.type == FD.TYPE_BYTES:
        return st.binary(max_size=32)
    if fd.type == FD.TYPE_ENUM:
        enum: EnumDescriptor = fd.enum_type
        return st.sampled_from([v.number for v in enum.values])
    raise AssertionError(f"unhandled field type {fd.type}")


def message_values(desc: Descriptor, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """Field values for ``desc``: required fields always, optional ones sometimes."""
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for fd in desc.fields:
        if fd.type == FD.TYPE_MESSAGE:
            if depth >= 2 and not fd.is_required:
                continue
            value: st.SearchStrategy[Any] = st.deferred(
                lambda fd=fd: message_values(fd.message_type, depth + 1)
            )
        else:
            value = _scalar(fd)
        if fd.is_repeated:
            optional[fd.name] = st.lists(value, max_size=3)
        elif fd.is_required:
            required[fd.name] = value
        else:
            optional[fd.name] = value
    return st.fixed_dictionaries(required, optional=optional)


def fill(message: Any, values: dict[str, Any]) -> None:
    """Set ``values`` (from :func:`message_values`) on a protobuf message."""
    desc = message.DESCRIPTOR
    for name, value in values.items():
        fd = desc.fields_by_name[name]
        if fd.is_repeated:
            target = getattr(message, name)
            for item in value:
                if fd.type == FD.TYPE_MESSAGE:
                    fill(target.add(), item)
                else:
                    target.append(item)
        elif fd.type == FD.TYPE_MESSAGE:
            sub = getattr(message, name)
            sub.SetInParent()
            fill(sub, value)
        else:
            setattr(message, name, value)


@st.composite
def random_command(draw: st.DrawFn, types: list[int] | None = None) -> bytes:
    """A framed BaseCommand with random sub-command values (sometimes mismatched); its type is
    one of ``types``, or mostly one that clients send."""
    if types is None:
        types = CLIENT_TYPES if draw(st.integers(0, 3)) else ALL_TYPES
    type_ = draw(st.sampled_from(types))
    cmd = T(type=type_)  # type: ignore[arg-type]
    field_number = type_
    if draw(st.integers(0, 9)) == 0:
        field_number = draw(st.sampled_from(sorted(SUBCOMMAND_FIELD)))
    name = SUBCOMMAND_FIELD.get(field_number)
    if name is not None and draw(st.integers(0, 19)) != 0:
        sub = getattr(cmd, name)
        sub.SetInParent()
        fill(sub, draw(message_values(sub.DESCRIPTOR)))
    body = cmd.SerializePartialToString()
    if type_ in (T.SEND, T.MESSAGE):
        return encode_raw_command_with_entry(body, draw(entries()))
    return encode_raw_command(body)


def encode_raw_command_with_entry(body: bytes, entry: bytes) -> bytes:
    return struct.pack(">II", len(body) + 4 + len(entry), len(body)) + body + entry


@st.composite
def entries(draw: st.DrawFn) -> bytes:
    """An entry as a producer sends it: good, with a bad checksum, or with garbage metadata."""
    kind = draw(st.sampled_from(["good", "bad-crc", "garbage-meta", "no-crc-garbage", "bytes"]))
    payload = draw(st.binary(max_size=64))
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind in ("good", "bad-crc"):
        meta = pb.MessageMetadata(producer_name="fuzz", sequence_id=0, publish_time=1)
        fill(meta, draw(message_values(pb.MessageMetadata.DESCRIPTOR)))
        entry = bytearray(encode_entry(meta, payload))
        if kind == "bad-crc":
            index = draw(st.integers(2, len(entry) - 1))
            entry[index] ^= draw(st.integers(1, 255))
        return bytes(entry)
    meta_bytes = draw(st.binary(max_size=48))
    declared = draw(st.one_of(st.just(len(meta_bytes)), st.integers(0, 2**32 - 1)))
    body = struct.pack(">I", declared) + meta_bytes + payload
    if kind == "no-crc-garbage":
        return body
    return struct.pack(">HI", 0x0E01, crc32c(body)) + body


@dataclass
class Outcome:
    """What the broker did with what a :class:`RawPeer` sent."""

    closed: bool
    commands: list[pb.BaseCommand] = field(default_factory=list)

    @property
    def types(self) -> list[int]:
        return [c.type for c in self.commands]


class RawPeer:
    """A raw socket to the broker that sends bytes and collects replies."""

    def __init__(self, port: int, *, handshake: bool) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.decoder = FrameDecoder(1 << 30)
        self.received: list[pb.BaseCommand] = []
        self.closed = False
        if handshake:
            self.sock.sendall(commands.connect("fuzz", protocol_version=20))
            self.read_until(lambda: bool(self.received))
            assert self.received and self.received[0].type == T.CONNECTED, self.received
            self.received.clear()

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            self.closed = True

    def read_until(self, done: Any, timeout: float = 10) -> None:
        """Read until ``done()`` or the broker closes; a timeout is a broker hang."""
        self.sock.settimeout(timeout)
        while not self.closed and not done():
            try:
                data = self.sock.recv(1 << 16)
            except ConnectionResetError:
                data = b""
            if not data:
                self.closed = True
                return
            self.received.extend(f.command for f in self.decoder.feed(data))

    def probe(self) -> Outcome:
        """Send a PING: the broker must answer with a PONG or close the connection."""
        self.send(commands.ping())
        self.read_until(lambda: any(c.type == T.PONG for c in self.received))
        return Outcome(self.closed, list(self.received))

    def close(self) -> None:
        self.sock.close()
