"""Frame encoding and the incremental, sans-IO frame decoder.

Wire layout (all integers big-endian)::

    simple command:   [total_size u32][command_size u32][BaseCommand]
    payload command:  [total_size u32][command_size u32][BaseCommand][entry ...]

    entry:            ([0x0e02][bem_size u32][BrokerEntryMetadata])  broker -> client only, optional
                      ([0x0e01][crc32c u32])                         optional; clients send it
                      [metadata_size u32][MessageMetadata][payload ...]

``total_size`` counts every byte after itself. The CRC32C covers ``metadata_size`` through the end
of the payload. A broker stores the *entry* exactly as received (from the first magic on) and
dispatches it behind a new MESSAGE command, so the producer's checksum reaches consumers intact.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, cast

from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.checksum import crc32c
from starquake.protocol.errors import ChecksumMismatchError, FrameTooLargeError, MalformedFrameError
from starquake.protocol.send_scan import SendFields, scan_send
from starquake.protocol.varint import read_u32

MAGIC_CHECKSUM = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
FRAME_PADDING = 10 * 1024

_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_TWO_U32 = struct.Struct(">II")
_CHECKSUM_HEAD = struct.Struct(">HI")
_MAGIC_CHECKSUM_BYTES = b"\x0e\x01"
_MAGIC_BEM_BYTES = b"\x0e\x02"


class Frame(NamedTuple):
    """One decoded frame: the command and, for SEND/MESSAGE, the entry bytes that follow it."""

    command: pb.BaseCommand
    entry: bytes | None


class ParsedEntry:
    """The parts of an entry (see the module docstring). A plain class, not a NamedTuple:
    mypyc cannot compile a NamedTuple with a memoryview field."""

    __slots__ = ("broker_entry_metadata", "checksum", "metadata", "payload")

    def __init__(
        self,
        metadata: pb.MessageMetadata,
        payload: memoryview,
        checksum: int | None,
        broker_entry_metadata: pb.BrokerEntryMetadata | None,
    ) -> None:
        self.metadata = metadata
        self.payload = payload
        self.checksum = checksum
        self.broker_entry_metadata = broker_entry_metadata


def encode_command(command: pb.BaseCommand) -> bytes:
    """Encode a simple (payload-less) command frame."""
    body = command.SerializeToString()
    size = len(body)
    return _TWO_U32.pack(size + 4, size) + body


def encode_raw_command(body: bytes) -> bytes:
    """Frame an already serialized BaseCommand."""
    size = len(body)
    return _TWO_U32.pack(size + 4, size) + body


def payload_frame_header(command_body: bytes, entry_size: int) -> bytes:
    """Header for a payload frame whose entry (``entry_size`` bytes) is written after it."""
    size = len(command_body)
    return _TWO_U32.pack(size + 4 + entry_size, size) + command_body


def encode_entry(metadata: pb.MessageMetadata, payload: bytes, *, checksum: bool = True) -> bytes:
    """Build an entry: optional checksum magic, metadata size, metadata and payload."""
    meta = metadata.SerializeToString()
    body = _U32.pack(len(meta)) + meta + payload
    if not checksum:
        return body
    return _CHECKSUM_HEAD.pack(MAGIC_CHECKSUM, crc32c(body)) + body


def encode_payload_command(command: pb.BaseCommand, entry: bytes) -> bytes:
    """Encode a full SEND or MESSAGE frame around an entry built by :func:`encode_entry`."""
    body = command.SerializeToString()
    return payload_frame_header(body, len(entry)) + entry


def parse_entry(
    entry: bytes | memoryview,
    *,
    verify_checksum: bool = True,
    require_fields: bool | None = None,
) -> ParsedEntry:
    """Split an entry into metadata and payload, verifying the CRC32C when one is present.

    ``require_fields`` (by default: as ``verify_checksum``) also demands the metadata's required
    fields (producer name, sequence id, publish time): Pulsar clients cannot decode a message
    without them, so a broker that stored one would block its subscriptions.

    Raises :class:`MalformedFrameError` for structural problems and
    :class:`ChecksumMismatchError` when the checksum does not match.
    """
    view = memoryview(entry)
    end = len(view)
    pos = 0
    bem: pb.BrokerEntryMetadata | None = None
    try:
        if end >= 6 and view[0:2] == _MAGIC_BEM_BYTES:
            (bem_size,) = _U32.unpack_from(view, 2)
            pos = 6 + bem_size
            if pos > end:
                raise MalformedFrameError("broker entry metadata runs past the end of the frame")
            bem = pb.BrokerEntryMetadata.FromString(bytes(view[6:pos]))
        checksum: int | None = None
        if end - pos >= 6 and view[pos : pos + 2] == _MAGIC_CHECKSUM_BYTES:
            (checksum,) = _U32.unpack_from(view, pos + 2)
            pos += 6
            if verify_checksum and crc32c(view[pos:]) != checksum:
                raise ChecksumMismatchError("checksum of the message does not match its content")
        if end - pos < 4:
            raise MalformedFrameError("payload frame too short for its metadata size")
        (meta_size,) = _U32.unpack_from(view, pos)
        meta_start = pos + 4
        meta_end = meta_start + meta_size
        if meta_end > end:
            raise MalformedFrameError("message metadata runs past the end of the frame")
        metadata = pb.MessageMetadata.FromString(view[meta_start:meta_end])  # type: ignore[arg-type]
        if (verify_checksum if require_fields is None else require_fields) and (
            not metadata.IsInitialized()
        ):
            raise MalformedFrameError("message metadata lacks required fields")
    except (ChecksumMismatchError, MalformedFrameError):
        raise
    except Exception as exc:  # protobuf DecodeError, struct.error
        raise MalformedFrameError(f"cannot decode message metadata: {exc}") from exc
    return ParsedEntry(metadata, view[meta_end:], checksum, bem)


def entry_metadata(entry: bytes | memoryview) -> pb.MessageMetadata:
    """Decode only the MessageMetadata of a stored entry (no checksum verification)."""
    return parse_entry(entry, verify_checksum=False).metadata


class FrameDecoder:
    """Incremental decoder: feed bytes in any chunking, get whole frames out.

    ``max_frame_size`` bounds ``total_size``; a larger frame raises :class:`FrameTooLargeError`
    before its body is buffered, so a hostile peer cannot make us allocate it. Whole frames are
    sliced straight out of the received chunk (one copy per entry); only an incomplete tail is
    buffered, and a large frame arriving in pieces is joined once, when it is complete.
    """

    __slots__ = ("_max_frame_size", "_need", "_parts", "_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING) -> None:
        self._parts: list[bytes] = []
        self._size = 0
        self._need = 4
        self._max_frame_size = max_frame_size

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a whole frame."""
        return self._size

    @property
    def max_frame_size(self) -> int:
        """The largest ``total_size`` accepted; may change between feeds."""
        return self._max_frame_size

    @max_frame_size.setter
    def max_frame_size(self, size: int) -> None:
        self._max_frame_size = size

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Add received bytes and return every frame they complete, in order."""
        return cast(list[Frame], self._decode(data, False))

    def feed_sends(self, data: bytes | bytearray | memoryview) -> list[Frame | SendFields]:
        """As :meth:`feed`, but a plain SEND comes as its :class:`SendFields`, read without
        protobuf (see :func:`~starquake.protocol.send_scan.scan_send`); other SENDs come as
        frames."""
        return self._decode(data, True)

    def _decode(self, data: bytes | bytearray | memoryview, scan: bool) -> list[Frame | SendFields]:
        if self._parts:
            self._parts.append(bytes(data))
            self._size += len(data)
            if self._size < self._need:
                return []
            buf = b"".join(self._parts)
            self._parts = []
            self._size = 0
        else:
            buf = bytes(data)
        frames: list[Frame | SendFields] = []
        pos = 0
        avail = len(buf)
        limit = self._max_frame_size
        parse = pb.BaseCommand.FromString
        while avail - pos >= 4:
            total = read_u32(buf, pos)
            if total > limit:
                raise FrameTooLargeError(f"frame of {total} bytes exceeds the limit of {limit}")
            if total < 4:
                raise MalformedFrameError(f"frame size {total} is too small")
            frame_end = pos + 4 + total
            if frame_end > avail:
                break
            cmd_size = read_u32(buf, pos + 4)
            if cmd_size > total - 4:
                raise MalformedFrameError("command size exceeds frame size")
            cmd_end = pos + 8 + cmd_size
            entry = buf[cmd_end:frame_end] if frame_end > cmd_end else None
            if scan:
                send = scan_send(buf, pos + 8, cmd_end, entry)
                if send is not None:
                    frames.append(send)
                    pos = frame_end
                    continue
            try:
                command = parse(buf[pos + 8 : cmd_end])
            except Exception as exc:
                raise MalformedFrameError(f"cannot decode command: {exc}") from exc
            if not command.HasField("type"):
                # An enum number this side does not know is kept as an unknown field, and an
                # absent ``type`` would read as the enum's first value (CONNECT).
                raise MalformedFrameError("command has no type, or one that is not known")
            frames.append(Frame(command, entry))
            pos = frame_end
        if pos < avail:
            rest = buf[pos:] if pos else buf
            self._parts.append(rest)
            self._size = len(rest)
            self._need = 4
            if len(rest) >= 4:
                total = read_u32(rest, 0)
                if total > limit:
                    raise FrameTooLargeError(f"frame of {total} bytes exceeds the limit of {limit}")
                self._need = 4 + total
        else:
            self._need = 4
        return frames


def entry_rows(metadata: pb.MessageMetadata) -> int:
    """Rows an entry gives a reader: its batch size, else 1; a chunk of a chunked message
    counts 1 on its first chunk and 0 on the others (the message belongs there)."""
    if metadata.HasField("num_messages_in_batch"):
        return int(metadata.num_messages_in_batch)
    if metadata.num_chunks_from_msg > 1:
        return 1 if metadata.chunk_id == 0 else 0
    return 1


def entry_num_messages(entry: bytes | memoryview) -> int:
    """Messages carried by a stored entry: ``num_messages_in_batch`` if present, else 1."""
    metadata = parse_entry(entry, verify_checksum=False).metadata
    if metadata.HasField("num_messages_in_batch"):
        return metadata.num_messages_in_batch
    return 1
