"""A plain SEND command read straight off the wire, without building protobuf objects.

Most frames a broker reads are SENDs whose command is ``BaseCommand{type: SEND, send:
CommandSend{...}}`` with a handful of integer fields. Decoding one through protobuf (a
BaseCommand, then its CommandSend, then each field by name) costs more than everything else the
broker does with the frame, so :func:`scan_send` reads such a command by hand. It only accepts
what it can read exactly as protobuf would: the two fields of BaseCommand in that order, and
CommandSend's scalar fields in any order (the last occurrence of a field wins, as in protobuf).
Anything else (a ``message_id``, an unknown field, a malformed or missing required field)
returns None, and the caller decodes the command through protobuf, which applies its own rules.

Wire format of what is accepted (tags are ``field_number << 3 | wire_type``)::

    BaseCommand:  0x08 0x06 (type = SEND)  0x32 <length varint> <CommandSend>
    CommandSend:  varint fields 1 producer_id, 2 sequence_id (both required), 3 num_messages,
                  4 txnid_least_bits, 5 txnid_most_bits, 6 highest_sequence_id, 7 is_chunk,
                  8 marker
"""

from __future__ import annotations

from typing import Final

from starquake.protocol._generated import starquake_wire_pb2 as pb

_SEND_TYPE: Final = 6
_SEND_FIELD_TAG: Final = 0x32  # field 6 (send), length-delimited
_MAX_VARINT_BYTES: Final = 10


class SendFields:
    """The fields of one SEND the broker acts on, and the frame's entry.

    Made by :func:`scan_send` from the wire, or by :func:`send_fields_of` from a decoded
    command; :meth:`message` gives the protobuf CommandSend either way (for error replies)."""

    __slots__ = (
        "_command",
        "_message",
        "entry",
        "has_highest",
        "has_txn",
        "highest_sequence_id",
        "is_chunk",
        "producer_id",
        "sequence_id",
        "txnid_least_bits",
        "txnid_most_bits",
    )

    def __init__(self, command: bytes, entry: bytes | None) -> None:
        self.producer_id = 0
        self.sequence_id = 0
        self.highest_sequence_id = 0
        self.has_highest = False
        self.txnid_least_bits = 0
        self.txnid_most_bits = 0
        self.has_txn = False
        self.is_chunk = False
        self.entry = entry
        self._command = command
        """The serialized BaseCommand (empty when made from a decoded message)."""
        self._message: pb.CommandSend | None = None

    def message(self) -> pb.CommandSend:
        """The SEND as a protobuf message (decoded now, if it was scanned)."""
        message = self._message
        if message is None:
            message = pb.BaseCommand.FromString(self._command).send
            self._message = message
        return message

    def base_command(self) -> pb.BaseCommand:
        """The whole command as a protobuf message."""
        if self._command:
            return pb.BaseCommand.FromString(self._command)
        return pb.BaseCommand(type=pb.BaseCommand.SEND, send=self.message())


def send_fields_of(send: pb.CommandSend, entry: bytes | None) -> SendFields:
    """The :class:`SendFields` of a SEND decoded through protobuf."""
    fields = SendFields(b"", entry)
    fields._message = send
    fields.producer_id = send.producer_id
    fields.sequence_id = send.sequence_id
    if send.HasField("highest_sequence_id"):
        fields.has_highest = True
        fields.highest_sequence_id = send.highest_sequence_id
    if send.HasField("txnid_most_bits") or send.HasField("txnid_least_bits"):
        fields.has_txn = True
        fields.txnid_most_bits = send.txnid_most_bits
        fields.txnid_least_bits = send.txnid_least_bits
    fields.is_chunk = send.is_chunk
    return fields


def scan_send(buf: bytes, start: int, end: int, entry: bytes | None) -> SendFields | None:
    """The SEND serialized in ``buf[start:end]`` (a whole BaseCommand), or None when it is not
    a plain SEND (see the module docstring): then decode it through protobuf."""
    if end - start < 4 or buf[start] != 0x08 or buf[start + 1] != _SEND_TYPE:
        return None
    if buf[start + 2] != _SEND_FIELD_TAG:
        return None
    length, pos = read_varint(buf, start + 3, end)
    if pos < 0 or pos + length != end:
        return None
    fields = SendFields(buf[start:end], entry)
    seen = 0  # bits: 1 producer_id, 2 sequence_id
    while pos < end:
        tag = buf[pos]
        if tag & 0x07 != 0 or tag < 0x08 or tag > 0x40:  # varint fields 1..8 only
            return None
        value, pos = read_varint(buf, pos + 1, end)
        if pos < 0:
            return None
        number = tag >> 3
        if number == 1:
            fields.producer_id = value
            seen |= 1
        elif number == 2:
            fields.sequence_id = value
            seen |= 2
        elif number == 4:
            fields.txnid_least_bits = value
            fields.has_txn = True
        elif number == 5:
            fields.txnid_most_bits = value
            fields.has_txn = True
        elif number == 6:
            fields.highest_sequence_id = value
            fields.has_highest = True
        elif number == 7:
            fields.is_chunk = value != 0
        # 3 (num_messages) and 8 (marker) are not used by the broker's SEND handling
    return fields if seen == 3 else None


def read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``buf[pos:end]`` and the position after it; the position is -1 when the
    varint runs past ``end`` or holds more than 64 bits (protobuf decides about those)."""
    value = 0
    shift = 0
    while True:
        if pos >= end or shift == 7 * _MAX_VARINT_BYTES:
            return 0, -1
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if shift == 7 * (_MAX_VARINT_BYTES - 1) and byte > 1:
                return 0, -1
            return value, pos
        shift += 7
