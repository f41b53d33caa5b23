"""The :class:`EntryInfo` of a sent entry read straight off its bytes, without protobuf objects.

Decoding a SEND's MessageMetadata through protobuf and reading its fields by name costs more
than storing the entry. :func:`scan_entry` reads the metadata by hand in the common case: only
fields whose encoding it can read exactly as protobuf would (integers, strings and bytes of
MessageMetadata, the last occurrence of a field winning). Anything else returns None, and the
caller decodes the entry through protobuf, which applies its own rules and errors: broker
entry metadata sent by a client, a checksum that does not match, a missing required field
(producer_name, sequence_id, publish_time), an embedded message (properties, encryption keys),
an unknown field, a base64 partition key, a string that is not UTF-8, a malformed encoding.

Entry layout: ``[0x0e01][crc32c u32]`` (optional) ``[metadata_size u32][MessageMetadata]
[payload]``; the CRC32C covers everything from ``metadata_size`` on.
"""

from __future__ import annotations

from typing import Final

from starquake.broker.entry_info import NONE_KEY, EntryInfo
from starquake.protocol.checksum import crc32c
from starquake.protocol.send_scan import read_varint
from starquake.protocol.varint import read_u32

_VARINT: Final = 0
_LENGTH: Final = 2
# MessageMetadata's fields by encoding (embedded messages, 4 and 13, are not read here).
# As bit masks (bit n: field n), tested without a set lookup.
_VARINT_FIELDS: Final = sum(
    1 << n for n in (2, 3, 8, 9, 11, 12, 17, 19, 20, 22, 23, 24, 25, 27, 28, 29, 30)
)
_LENGTH_FIELDS: Final = sum(1 << n for n in (1, 5, 6, 7, 14, 15, 16, 18, 26))
_KEPT_LENGTH_FIELDS: Final = (1 << 6) | (1 << 18) | (1 << 26)
"""The string and bytes fields whose value the scan keeps (the others are only checked)."""


_new_info = tuple.__new__
"""Makes an EntryInfo from a tuple of all its fields at the cost of a tuple (the NamedTuple's
own constructor is a Python function: several times slower, once per entry sent)."""


def _int32(value: int) -> int:
    """An int32 field's value from its varint (protobuf keeps the low 32 bits)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _int64(value: int) -> int:
    """An int64 field's value from its varint (two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


class _Fields:
    """What the scan keeps of the metadata's fields (the last occurrence of each)."""

    __slots__ = (
        "b64",
        "chunk_id",
        "deliver_at",
        "has_chunk_id",
        "num_chunks",
        "num_messages",
        "ordering_key",
        "partition_key",
        "publish_time",
        "required",
        "uuid",
    )

    def __init__(self) -> None:
        self.required = 0  # bits: 1 producer_name, 2 sequence_id, 4 publish_time
        self.publish_time = 0
        self.num_messages = 1
        self.deliver_at = 0
        self.chunk_id = 0
        self.has_chunk_id = False
        self.num_chunks = 0
        self.ordering_key: bytes | None = None
        self.partition_key: bytes | None = None
        self.b64 = False
        self.uuid = b""

    def integer(self, number: int, value: int) -> None:
        """A varint field."""
        if number == 2:
            self.required |= 2
        elif number == 3:
            self.required |= 4
            self.publish_time = value
        elif number == 11:
            self.num_messages = _int32(value)
        elif number == 17:
            self.b64 = value != 0
        elif number == 19:
            self.deliver_at = _int64(value)
        elif number == 27:
            self.num_chunks = _int32(value)
        elif number == 29:
            self.chunk_id = _int32(value)
            self.has_chunk_id = True

    def data(self, number: int, value: bytes) -> None:
        """A string or bytes field the scan keeps."""
        if number == 6:
            self.partition_key = value
        elif number == 18:
            self.ordering_key = value
        elif number == 26:
            self.uuid = value


def scan_entry(entry: bytes) -> tuple[EntryInfo, bool, int] | None:
    """For an entry as a client sent it: its info, whether it is the last chunk of its message
    as the SEND handling counts it (no ``chunk_id``, or ``chunk_id >= num_chunks_from_msg -
    1``), and its payload's size; None when it must be decoded through protobuf."""
    return _scan(entry, True)


def stored_entry_info(entry: bytes) -> EntryInfo | None:
    """The info of an entry read back from storage, as :func:`scan_entry` reads it but without
    checking its checksum again (it was checked when the entry was sent); None: decode it
    through protobuf. For the dispatch of entries whose info is no longer cached."""
    scanned = _scan(entry, False)
    return None if scanned is None else scanned[0]


def _scan(entry: bytes, check_crc: bool) -> tuple[EntryInfo, bool, int] | None:
    end = len(entry)
    pos = 0
    if end >= 2 and entry[0] == 0x0E:
        if entry[1] != 0x01 or end < 10:
            return None  # broker entry metadata, or too short: left to protobuf
        if check_crc and crc32c(entry[6:]) != read_u32(entry, 2):
            return None
        pos = 6
    if end - pos < 4:
        return None
    meta_end = pos + 4 + read_u32(entry, pos)
    if meta_end > end:
        return None
    fields = _Fields()
    if not _read_fields(entry, pos + 4, meta_end, fields):
        return None
    return _result(fields, end - meta_end)


def _read_fields(entry: bytes, pos: int, end: int, fields: _Fields) -> bool:
    """Read the fields of ``entry[pos:end]`` into ``fields``; False: left to protobuf."""
    while pos < end:
        tag, pos = read_varint(entry, pos, end)
        if pos < 0 or tag >= 1 << 14:
            return False
        number = tag >> 3
        wire_type = tag & 0x07
        value, pos = read_varint(entry, pos, end)
        if pos < 0:
            return False
        if number > 30:
            return False
        if wire_type == _VARINT:
            if not (_VARINT_FIELDS >> number) & 1:
                return False
            fields.integer(number, value)
        elif wire_type == _LENGTH:
            if not (_LENGTH_FIELDS >> number) & 1 or pos + value > end:
                return False
            if number == 1:
                fields.required |= 1
            elif (_KEPT_LENGTH_FIELDS >> number) & 1:
                fields.data(number, entry[pos : pos + value])
            pos += value
        else:
            return False
    return fields.required == 7


def _result(fields: _Fields, payload_size: int) -> tuple[EntryInfo, bool, int] | None:
    if fields.ordering_key is not None:
        sticky = fields.ordering_key
    elif fields.partition_key is not None:
        if fields.b64 or not _is_utf8(fields.partition_key):
            return None
        sticky = fields.partition_key
    else:
        sticky = NONE_KEY
    chunk_id = fields.chunk_id
    num_chunks = fields.num_chunks
    is_chunk = fields.has_chunk_id and num_chunks > 1
    chunk_uuid = ""
    if is_chunk:
        if not _is_utf8(fields.uuid):
            return None
        chunk_uuid = fields.uuid.decode()
    info: EntryInfo = _new_info(  # EntryInfo(...) without its Python-level __new__
        EntryInfo,
        (
            fields.num_messages,
            sticky,
            fields.deliver_at,
            fields.publish_time,
            is_chunk,
            chunk_uuid,
            not is_chunk or chunk_id >= num_chunks - 1,
        ),
    )
    last_chunk = not fields.has_chunk_id or chunk_id >= num_chunks - 1
    return info, last_chunk, payload_size


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True
